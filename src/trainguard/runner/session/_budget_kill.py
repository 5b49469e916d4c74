"""After a worker is killed at the run's memory budget: the attempt recorded, the pool made
smaller, and the trial run again (or the run stopped when one trial alone cannot fit).

:func:`decide_after_budget_kill` is the decision, pure; :func:`after_budget_kill` records the kill
and hands the loop what it does with the attempt (a :class:`~trainguard.runner.session._records.Rerun`
or a :class:`~trainguard.runner.session._records.Finish`); it never touches the loop's queue.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from trainguard.exceptions import ConfigError
from trainguard.outcomes import Failure
from trainguard.runner.policy import BudgetKill, EndCause
from trainguard.runner.session._records import BUDGET_KILLS_PER_TRIAL, Attempt, Finish, Rerun, WorkerRecord
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._recovery import Recovery
    from trainguard.runner.session.soft_limit_and_flight import LastSeconds

__all__ = ["BudgetKillVerdict", "decide_after_budget_kill", "after_budget_kill"]


@dataclass(frozen=True, slots=True)
class BudgetKillVerdict:
    """What follows a kill at the memory budget.

    ``action``: ``"stop"`` (one trial alone is over the budget: the run stops with ``message``),
    ``"rerun"`` (the trial runs again, with fewer workers, no retry used), ``"finish"`` (killed at
    the budget too often: its attempt ends and the retry policy decides) or ``"none"`` (the worker
    ran no trial: only the pool is made smaller).
    """

    action: Literal["stop", "rerun", "finish", "none"]
    message: str = ""


def decide_after_budget_kill(
    choice: BudgetKill,
    *,
    index: int | None,
    fresh_worker: bool,
    budget_bytes: int,
    gpu_budgets: Mapping[int, int],
    budget_kills: int,
) -> BudgetKillVerdict:
    """Whether a trial killed at the budget stops the run, runs again or ends its attempt.

    A trial whose tree alone crossed the budget in a fresh worker (its first trial: nothing else in
    it) stops the run, as no concurrency can make it fit; on a GPU whose budget is not the largest
    it may fit another GPU, and in a worker grown by earlier trials it may fit a fresh one: both run
    again, up to :data:`~trainguard.runner.session._records.BUDGET_KILLS_PER_TRIAL` times.

    Args:
        choice: the kill the sampler made (its ``alone`` and ``values``).
        index: the trial the worker was running (None: none).
        fresh_worker: whether that trial was the worker's first.
        budget_bytes: the run's memory budget.
        gpu_budgets: each GPU's budget, under a GPU budget (else empty).
        budget_kills: the times this trial was killed at the budget before, this session.

    Returns:
        The verdict.
    """
    gpu = choice.values.get("gpu")
    largest = gpu is None or choice.values["budget_bytes"] >= max(gpu_budgets.values(), default=0)
    if index is not None and choice.alone and fresh_worker and largest:
        named = (
            f"memory_budget={format_bytes(budget_bytes)}"
            if gpu is None
            else f"gpu_memory_budget={format_bytes(choice.values['budget_bytes'])} (GPU {gpu})"
        )
        return BudgetKillVerdict(
            "stop",
            f"{named} is below one trial's measured peak: trial {index} alone reached "
            f"{format_bytes(choice.values['tree_bytes'])} and was killed at the budget: "
            "raise it above that (or make the trial smaller)",
        )
    if index is None:
        return BudgetKillVerdict("none")
    if budget_kills >= BUDGET_KILLS_PER_TRIAL:
        return BudgetKillVerdict("finish")
    return BudgetKillVerdict("rerun")


def after_budget_kill(
    *,
    pool: Pool,
    recorder: Recorder,
    recovery: Recovery,
    last: LastSeconds,
    worker: WorkerRecord,
    run: Attempt | None,
    cause: EndCause,
) -> Rerun | Finish | None:
    """A worker killed at the memory budget (its kill recorded already): the decision of
    :func:`decide_after_budget_kill` carried out on the store and the pool, and what the loop does
    with the attempt: run it again (no ``retries`` used), end it, or nothing (no trial ran).

    Args:
        pool: the pool (made smaller, or no more spares, after the kill).
        recorder: the store writes.
        recovery: builds the attempt that runs again.
        last: the worker's last seconds (the flight recorder of the attempt).
        worker: the killed worker.
        run: the attempt it was running, or None.
        cause: why the worker ended, as classified.

    Returns:
        A :class:`Rerun`, a :class:`Finish` or None.

    Raises:
        ConfigError: one trial alone is over the budget: the run stops.
    """
    choice = worker.budget_kill
    assert choice is not None
    gpus = pool.gpu.config.budgets if pool.gpu is not None else {}
    verdict = decide_after_budget_kill(
        choice,
        index=run.index if run is not None else None,
        fresh_worker=worker.trials_done == 0,
        budget_bytes=pool.planner.budget_bytes or 0,
        gpu_budgets=gpus,
        budget_kills=run.budget_kills if run is not None else 0,
    )
    duration = None if run is None else time.monotonic() - run.started_mono
    peak = worker.trial_peak_rss or None
    error = Failure.of_end("killed_budget", cause.message, cause.detail)
    flight = last.flight_record(worker.worker_id, "killed_budget") if run is not None else None

    def store_killed(run: Attempt) -> None:  # the attempt only: the trial stays unfinished
        recorder.finish_attempt(
            run,
            "killed_budget",
            error=error if flight is None else replace(error, flight_recorder=flight),
            peak=peak,
            duration_s=duration,
        )

    if verdict.action == "stop":
        assert run is not None
        store_killed(run)
        recorder.event(
            "budget_too_small", verdict.message, data=choice.values, worker=worker, index=run.index
        )
        raise ConfigError(verdict.message)
    pool.budget.after_kill(worker, choice)
    if run is None:
        return None
    if verdict.action == "finish":
        return Finish(run, "killed_budget", error, None, peak, duration, flight)
    store_killed(run)
    return Rerun(
        recovery.rerun_after_budget_kill(worker, run, alone=choice.alone, workers=pool.planner.target)
    )
