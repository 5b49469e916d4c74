"""A trial's result message, read: the worker's tree measured after it, the value parsed, its stats
and flight recorder kept, and the decision the loop applies (the attempt's end); then what becomes
of the worker that ran it (kept, trimmed, recycled, a replacement started early).

A result that is not JSON ends its attempt ``protocol_error``; a trial that filled the disk of its
checkpoints stops the run (:func:`~trainguard.runner.session._ending.trial_filled_the_disk`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainguard.exceptions import StoreError
from trainguard.outcomes import Failure
from trainguard.runner.policy import RecycleDecision, decide_recycle
from trainguard.runner.session._ending import trial_filled_the_disk
from trainguard.runner.session._records import Finish
from trainguard.runner.session._results import stats_message

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy, WorkerHistory
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import Attempt, WorkerRecord
    from trainguard.runner.session._stages import Stages
    from trainguard.runner.session.soft_limit_and_flight import LastSeconds

__all__ = ["TrialEnd", "read_result", "WorkerNext", "decide_worker_next"]


@dataclass(frozen=True, slots=True)
class TrialEnd:
    """A result read: the attempt's end for the loop, the worker's peak over the trial and its
    tree's RSS after it, and the trial's stats (for the pool's planner)."""

    finish: Finish
    peak: int
    rss_after: int
    stats: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkerNext:
    """What becomes of a worker after its trial: ``retire`` (with ``decision``), ``trim`` (a
    ``malloc_trim(0)`` first, then decided again), ``prestart`` (kept; a replacement may start
    early) or ``keep``."""

    action: Literal["retire", "trim", "prestart", "keep"]
    decision: RecycleDecision | None = None


def read_result(
    *,
    pool: Pool,
    recorder: Recorder,
    stages: Stages,
    last: LastSeconds,
    worker: WorkerRecord,
    run: Attempt,
    msg: dict[str, Any],
) -> TrialEnd:
    """Read a finished (not staged) trial's result message and record what it measured.

    Args:
        pool: the pool (the worker's tree read, its record updated under the lock).
        recorder: the store writes.
        stages: the staged trials' folders (a full disk).
        last: the worker's last seconds (the flight recorder).
        worker: the worker that ran it.
        run: the attempt it ran.
        msg: the ``result`` message.

    Returns:
        The trial's end.

    Raises:
        DiskFullError: the trial filled the disk of its checkpoints.
    """
    recorder.tmpfs_removed(worker, run, worker.handle.trial_ended())
    reading = pool.read_tree(worker, rediscover=True)
    own_rss = int(msg.get("rss_bytes") or 0)
    rss_after = reading[0] if reading else own_rss
    children = max(0, rss_after - own_rss)
    # the worker's own high-water mark counts shared data's pages: not used when it is charged
    # private memory only
    hwm = 0 if pool.private else (msg.get("hwm_bytes") or 0) + children
    with pool.lock:
        worker.trial = None
        worker.state = "idle"
        worker.cur_rss = rss_after
        peak = max(worker.trial_peak_rss, rss_after, hwm)
        worker.trial_ended(rss_after, peak, (msg.get("stats") or {}).get("bytes_in_use"))
    status, value, error = _result_of(msg)
    stats = msg.get("stats") or {}
    duration = float(msg["duration_s"])
    if status != "ok" and error is not None and error.disk_full:
        # before any other write to the store: on the same disk it would fail first
        trial_filled_the_disk(stages, recorder, worker, run, error, peak, duration)  # raises
    if any(k in stats for k in ("census", "tfjs", "node", "fragmentation")) or stats.get("cleanup_s"):
        recorder.trial_stats(worker.worker_id, run.index, stats_message(run.index, stats), stats)
    recorder.bytes_in_use(worker.worker_id, run.index, run.attempt, stats)
    flight = last.result(recorder, worker, error, status, stats, rss_after)
    finish = Finish(run, status, error, value, peak, duration, flight)
    return TrialEnd(finish, peak, rss_after, stats)


def _result_of(msg: dict[str, Any]) -> tuple[str, Any, Failure | None]:
    """A result message's status, value and failure, read at the pipe: a value that is not JSON,
    or an error that is not a failure's record, is the worker's ``protocol_error``."""
    status = msg["status"]
    try:
        value = json.loads(msg["value_json"]) if status == "ok" else None
    except (TypeError, ValueError) as err:
        return (
            "protocol_error",
            None,
            Failure("protocol_error", f"the worker sent a result that is not JSON: {err}"),
        )
    try:
        error = None if msg.get("error") is None else Failure.from_dict(msg["error"])
    except StoreError as err:
        words = str(err).partition(";")[0]
        return (
            "protocol_error",
            None,
            Failure("protocol_error", f"the worker sent a malformed error ({words})"),
        )
    return status, value, error


def decide_worker_next(
    policy: Policy, history: WorkerHistory | None, run: Attempt, status: str, *, more_to_run: bool
) -> WorkerNext:
    """Whether the worker that ran ``run`` is recycled now, trimmed first, or kept.

    Args:
        policy: the recycle rules.
        history: the worker's series, this trial included (None when nothing more is to run: not read).
        run: the attempt it ran.
        status: the attempt's status.
        more_to_run: whether trials wait and the run goes on.

    Returns:
        The decision; after an out-of-memory error the worker is always retired.
    """
    if status == "framework_oom":
        # what the failed allocation held, and the fragmentation it left, stay in this process
        # (empty_cache() does not give it back): never run another trial in it
        return WorkerNext(
            "retire",
            RecycleDecision(
                "out_of_memory",
                {"index": run.index, "attempt": run.attempt},
                f"trial {run.index} ran out of memory in it: a worker is never reused after an OOM",
            ),
        )
    if not more_to_run or history is None:
        return WorkerNext("keep")
    decision = decide_recycle(policy, history)
    if decision is not None and decision.trim_first:
        return WorkerNext("trim", decision)
    if decision is not None:
        return WorkerNext("retire", decision)
    return WorkerNext("prestart")
