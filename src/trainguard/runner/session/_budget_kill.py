"""After a worker is killed at the run's memory budget: the attempt recorded, the pool made
smaller, and the trial run again (or the run stopped when one trial alone cannot fit)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from trainguard.exceptions import ConfigError
from trainguard.runner.policy import EndCause
from trainguard.runner.session._records import BUDGET_KILLS_PER_TRIAL, Attempt, WorkerRecord
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner.session._loop import Session

__all__ = ["after_budget_kill"]


def after_budget_kill(session: Session, worker: WorkerRecord, run: Attempt | None, cause: EndCause) -> None:
    """A worker killed at the memory budget (recorded already): with fewer workers from now on,
    its trial runs again, the pool's doing, not the trial's: no ``retries`` are used, up to
    :data:`BUDGET_KILLS_PER_TRIAL` times; then the retry policy decides. A trial whose tree alone
    crossed the budget in a fresh worker (its first trial: nothing else in it) stops the run, as
    no concurrency can make it fit; in a worker grown by earlier trials it runs again in a fresh one."""
    choice = worker.budget_kill
    assert choice is not None
    budget = session.pool.planner.budget_bytes or 0
    duration = None if run is None else time.monotonic() - run.started_mono
    peak = worker.trial_peak_rss or None
    error = {"status": "killed_budget", "message": cause.message, **cause.detail}
    flight = session.last.flight_record(worker.worker_id, "killed_budget") if run is not None else None

    def store_killed(run: Attempt) -> None:  # the attempt only: the trial stays unfinished
        session.recorder.finish_attempt(
            run.index,
            run.attempt,
            status="killed_budget",
            error=error if flight is None else {**error, "flight_recorder": flight},
            peak_rss_bytes=peak,
            duration_s=duration,
        )

    gpu = choice.values.get("gpu")
    gpus = session.pool.gpu.config.budgets if session.pool.gpu is not None else {}
    # on a GPU whose budget is not the largest, the trial may fit another GPU: it runs again
    largest = gpu is None or choice.values["budget_bytes"] >= max(gpus.values(), default=0)
    if run is not None and choice.alone and worker.trials_done == 0 and largest:
        store_killed(run)
        named = (
            f"memory_budget={format_bytes(budget)}"
            if gpu is None
            else f"gpu_memory_budget={format_bytes(choice.values['budget_bytes'])} (GPU {gpu})"
        )
        message = (
            f"{named} is below one trial's measured peak: trial {run.index} alone reached "
            f"{format_bytes(choice.values['tree_bytes'])} and was killed at the budget: "
            "raise it above that (or make the trial smaller)"
        )
        session.recorder.event(
            "budget_too_small", message, data=choice.values, worker=worker, index=run.index
        )
        raise ConfigError(message)
    session.pool.after_budget_kill(worker, choice)
    if run is None:
        return
    if run.budget_kills >= BUDGET_KILLS_PER_TRIAL:
        session._finish_attempt(worker, run, "killed_budget", error, None, peak, duration, flight=flight)
        return
    store_killed(run)
    session._queue.appendleft(
        session.recovery.rerun_after_budget_kill(
            worker, run, alone=choice.alone, workers=session.pool.planner.target
        )
    )
