"""Live memory (bytes in use plus RSS outside glibc's heaps) read every few readings, as on a
loaded machine where the heaps' split is read only when affordable: RSS growing inside the heaps
is still held from a ``leak`` on its own, and a live series read long ago no longer speaks."""

from __future__ import annotations

import numpy as np

from trainguard.leaks import _plan
from trainguard.leaks.stats import Verdict

TOL = 2048.0
GATES = (True, True, False)


def _series(n: int, rss_per_call: float, live_per_call: float, *, every: int, last_live: int | None = None):
    """RSS and (every ``every``-th reading, up to ``last_live``) live memory, 20 KB of noise."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        row = {"iteration": i * 10, "bytes": 1e8 + rss_per_call * i * 10 + rng.normal(0, 20e3)}
        if i % every == 0 and (last_live is None or i <= last_live):
            row["live_bytes"] = 8e7 + live_per_call * i * 10 + rng.normal(0, 20e3)
        rows.append(row)
    return rows


def _held(series, final: bool):
    memory = _plan.decide_series(series, "bytes", 0.01, TOL, final, True)
    assert memory.verdict is Verdict.LEAK
    return _plan.retention_hold(series, memory, alpha=0.01, tolerance=TOL, final=final, gates=GATES)


def test_retention_is_held_when_the_latest_reading_went_without_the_split() -> None:
    series = _series(60, rss_per_call=4e3, live_per_call=0.0, every=3)
    assert "live_bytes" not in series[-1]  # 59 % 3: the latest reading could not afford the heaps
    held = _held(series, final=True)
    assert held.verdict is Verdict.NO_LEAK and "inside malloc's heaps" in held.reason


def test_a_leak_live_memory_sees_stays_a_leak_with_a_sparse_split() -> None:
    series = _series(60, rss_per_call=4e3, live_per_call=4e3, every=3)
    assert _held(series, final=False).verdict is Verdict.LEAK


def test_too_few_live_readings_wait_and_the_final_look_goes_by_rss() -> None:
    series = _series(14, rss_per_call=4e3, live_per_call=0.0, every=6)  # 3 readings of live memory
    waiting = _held(series, final=False)
    assert waiting.verdict is None and "waiting for live memory (3 readings of it)" in waiting.reason
    assert _held(series, final=True).verdict is Verdict.LEAK


def test_live_memory_read_long_ago_does_not_speak_for_the_run() -> None:
    # the split stopped at reading 30 of 60: a rise after it would not show, so RSS decides
    series = _series(60, rss_per_call=4e3, live_per_call=0.0, every=1, last_live=30)
    assert not _plan.live_is_recent(series)
    assert _held(series, final=False).verdict is Verdict.LEAK
    assert _plan.live_decision(series, alpha=0.01, tolerance=TOL) is None
    # within the last quarter of the readings (at least the last 5) it does
    assert _plan.live_is_recent(_series(60, 0.0, 0.0, every=1, last_live=45))
    assert not _plan.live_is_recent(_series(12, 0.0, 0.0, every=1, last_live=6))
    assert _plan.live_is_recent(_series(12, 0.0, 0.0, every=1, last_live=7))


def test_live_memory_that_grows_like_rss_is_not_called_retention_before_its_own_gates_pass() -> None:
    # a sparse, noisy live series (every 3rd reading, 150 KB of noise) growing as RSS does: its own
    # look has not passed its gates yet ("growth is slowing down", 5.9 then 3.7 KiB/iter), but its
    # interval is clear of the tolerance and its recent part grows: the leak RSS calls stands (a
    # 64 KiB mmap a call beside five busy processes was "the growth is inside malloc's heaps")
    rng = np.random.default_rng(3)
    series = []
    for i in range(40):
        row = {"iteration": i * 10, "bytes": 1e8 + 4e4 * i + rng.normal(0, 20e3)}
        if i % 3 == 0:
            row["live_bytes"] = 8e7 + 4e4 * i + rng.normal(0, 150e3)
        series.append(row)
    live = _plan.decide_series(series, "live_bytes", 0.01, TOL, False, *GATES)
    assert live.verdict is None and live.slope is not None and live.slope.ci_low > TOL, live.reason
    assert _held(series, final=False).verdict is Verdict.LEAK
