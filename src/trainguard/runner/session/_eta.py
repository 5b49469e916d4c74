"""The run's estimated time left, from the pace of the trials this session finished.

A pure decision: the loop passes its clock readings. The pace is measured up to the last trial that
finished, and the time since then is taken off, so the estimate counts down between two finishes
instead of growing with the elapsed time (``elapsed / done * remaining`` equals the elapsed time
whenever as many trials remain as are done, and rises with it second by second).
"""

from __future__ import annotations


def eta_seconds(
    *, started: float, last_done: float | None, done: int, remaining: int, now: float
) -> float | None:
    """Seconds left for ``remaining`` trials, or None while there is no pace to go by.

    Args:
        started: when this session started (monotonic clock).
        last_done: when this session's latest trial finished, or None before the first.
        done: trials this session finished (earlier sessions' results do not set the pace).
        remaining: trials not finished yet.
        now: the clock now.

    Returns None when no trial of this session has finished, or when the pace says the run should
    already be over (a slower trial is running: there is no honest figure to show); 0 when nothing
    remains.
    """
    if remaining <= 0:
        return 0.0
    if done <= 0 or last_done is None:
        return None
    per_trial = max(last_done - started, 0.0) / done
    left = per_trial * remaining - max(now - last_done, 0.0)
    return left if left > 0 else None
