"""A worker's end, once the loop has reaped it: the kill and the end recorded, and what the loop
does with the attempt it was running.

:func:`after_death` classifies the end (its backend's handle says why: a limit's kill, a crash, a
lost node) and hands the loop a decision: run the attempt again (a lost node), end it (a kill or a
crash; what follows is the recovery's), or nothing. A kill at the memory budget is
:mod:`~trainguard.runner.session._budget_kill`'s. A worker that dies before it was ready is a
configuration problem: :class:`~trainguard.exceptions.WorkerCrashedError`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Literal

from trainguard.exceptions import WorkerCrashedError
from trainguard.outcomes import Failure
from trainguard.runner.policy import EndCause, KillDecision, Policy, is_grace_kill
from trainguard.runner.session._budget_kill import after_budget_kill
from trainguard.runner.session._records import Finish, Rerun

if TYPE_CHECKING:
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import WorkerRecord
    from trainguard.runner.session._recovery import Recovery
    from trainguard.runner.session.soft_limit_and_flight import LastSeconds

__all__ = ["after_death", "pressure_end", "protocol_error"]

logger = logging.getLogger(__name__)


def pressure_end(policy: Policy, kill: KillDecision | None) -> Literal["grace_expired", "ignored"]:
    """How a pressure ended when its worker died: its grace ran out (the kill's status and limit
    say so: :func:`~trainguard.runner.policy.is_grace_kill`), or it was ignored (the worker died
    of anything else)."""
    return "grace_expired" if is_grace_kill(policy, kill) else "ignored"


def protocol_error(pool: Pool, worker: WorkerRecord, cause: str) -> None:
    """A worker sent bytes that are not a message (its trial wrote onto the channel): it is ended,
    and its trial fails with the cause when its end is read (:func:`after_death`); the run goes on
    with a fresh worker.

    Args:
        pool: the pool (the worker's record, under its lock).
        worker: the worker.
        cause: what it sent, in words.
    """
    with pool.lock:
        worker.protocol_error = (
            f"worker {worker.worker_id} sent {cause}: something in the trial wrote onto trainguard's "
            "message channel, so the worker was ended"
        )
    logger.warning("worker %d: protocol error: %s", worker.worker_id, cause)
    worker.handle.kill()


def after_death(
    *,
    pool: Pool,
    recorder: Recorder,
    recovery: Recovery,
    last: LastSeconds,
    worker: WorkerRecord,
    previous: str,
    rc: int | None,
) -> Rerun | Finish | None:
    """The end of ``worker`` (reaped; ``previous`` its state before, ``rc`` its exit status)
    recorded, and what the loop does with the attempt it was running.

    Args:
        pool: the pool (the worker's record, under its lock).
        recorder: the store writes.
        recovery: a lost node's rerun.
        last: the worker's last seconds (flight recorder, pressure's end).
        worker: the worker that ended.
        previous: its state when its end was seen.
        rc: its exit status (None: unknown).

    Returns:
        A :class:`Rerun`, a :class:`Finish`, or None (no trial to act on).

    Raises:
        WorkerCrashedError: it died before it was ready (and its node was not lost).
        ConfigError: one trial alone is over the memory budget.
    """
    with pool.lock:
        run, kill = worker.trial, worker.kill or worker.handle.kill_decision
        worker.trial = None
    if run is not None:  # the files its trial left in /dev/shm: their memory outlives it
        recorder.tmpfs_removed(worker, run, worker.handle.trial_ended())
    if kill is not None:  # the sampler thread killed it; the loop records it (one store writer)
        recorder.kill(worker, run, kill)
    if worker.protocol_error is not None:
        cause = EndCause(
            "protocol_error" if run is not None else None,
            "protocol_error",
            {"exitcode": rc},
            worker.protocol_error,
        )
    else:
        cause = worker.handle.classify(rc, in_trial=run is not None, kill=kill)
    recorder.end_worker(
        worker,
        cause.worker_reason,
        {**cause.detail, "message": cause.message, "trials": worker.trials_done},
    )
    if worker.budget_kill is not None:
        return after_budget_kill(
            pool=pool, recorder=recorder, recovery=recovery, last=last, worker=worker, run=run, cause=cause
        )
    if previous in ("starting", "loading") and cause.worker_reason not in ("node_lost", "pilot_lost"):
        # a worker that cannot start is a configuration problem; one whose node was lost is not
        raise WorkerCrashedError(
            f"worker {worker.worker_id} died before it was ready: {cause.message}; see its output above",
            pid=worker.handle.pid,
            exitcode=rc,
        )
    if run is None or cause.attempt_status is None:
        return None
    peak = (
        max(worker.trial_peak_rss, int(kill.value) if kill and kill.status == "killed_memory" else 0) or None
    )
    error = Failure.of_end(cause.attempt_status, cause.message, cause.detail)
    logger.info("trial %d attempt %d: %s", run.index, run.attempt, cause.message)
    flight = last.flight_record(worker.worker_id, cause.attempt_status)
    last.record_end(recorder, worker, pressure_end(pool.policy, kill), rss_bytes=peak)
    duration = time.monotonic() - run.started_mono
    if cause.detail.get("rerun"):
        again = recovery.rerun_after_loss(worker, run, error, peak, duration)
        if again is not None:
            return Rerun(again)
    return Finish(run, cause.attempt_status, error, None, peak, duration, flight)
