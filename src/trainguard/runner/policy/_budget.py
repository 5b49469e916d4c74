"""The memory budget of a whole run, pure: how many workers fit, which one to end when the trees
together cross it, when to start a spare, and how many threads each worker gets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainguard.runner.policy._recycle import (
    WorkerHistory,
    decide_recycle,
    growth_per_trial,
    predict_next_peak,
)
from trainguard.runner.policy._values import median
from trainguard.units import format_bytes, format_bytes_apart

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy

__all__ = [
    "BUDGET_HEADROOM",
    "BudgetDecision",
    "next_peak_estimate",
    "budget_workers",
    "decide_budget",
    "should_prestart",
    "BudgetKill",
    "choose_budget_kill",
    "recycle_expected_soon",
    "choose_threads",
]


# --------------------------------------------------------------------------------------------------
# the memory budget of a whole run (Runner(memory_budget=..., workers="auto"))

#: Room a fresh worker gets above its measured first-trial peak when the budget is divided into
#: worker slots: what a worker may grow (recycling keeps it under the budget) before it is replaced.
BUDGET_HEADROOM = 1.15


@dataclass(frozen=True, slots=True)
class BudgetDecision:
    """What the memory budget says about one worker or the pool.

    ``action`` is one of ``"run"`` (give the worker a trial), ``"recycle"`` (replace it first: its
    next trial would not fit, a fresh worker's would), ``"wait"`` (keep it idle until another
    worker's trial ends), ``"retire"`` (end it: fewer workers fit), ``"over_budget"`` (one trial
    alone does not fit: stop the run), or ``"workers"`` (a concurrency choice, ``values["workers"]``).
    """

    action: str
    message: str
    values: dict[str, Any] = field(default_factory=dict)


def next_peak_estimate(policy: Policy, history: WorkerHistory) -> float | None:
    """The peak a worker's next trial is expected to reach: the predictive slope's forecast once it
    has ``min_trials_for_slope`` readings, before that the highest peak or RSS it has shown."""
    if not history.rss_after_bytes:
        return None
    if history.readings >= policy.min_trials_for_slope:
        predicted = predict_next_peak(history)
        if predicted is not None:
            return predicted
    return float(max(max(history.peak_bytes or (0,)), history.rss_after_bytes[-1]))


def budget_workers(budget_bytes: int, max_workers: int, fresh_peak_bytes: float | None) -> BudgetDecision:
    """How many workers run at once under ``budget_bytes``: as many fresh workers as fit with
    :data:`BUDGET_HEADROOM` room each, at least 1, at most ``max_workers``.

    ``fresh_peak_bytes`` is the highest peak measured of a fresh worker's first trial (which pays the
    framework import), or None before any trial ended: then one worker runs until one has.
    """
    if fresh_peak_bytes is None or fresh_peak_bytes <= 0:
        return BudgetDecision(
            "workers",
            "1 worker until a trial's peak is measured (nothing is known of a trial's memory yet)",
            {"workers": 1, "budget_bytes": budget_bytes, "max_workers": max_workers},
        )
    fit = budget_bytes / (fresh_peak_bytes * BUDGET_HEADROOM)
    workers = max(1, min(max_workers, int(fit)))
    capped = f", capped at {max_workers} (max workers)" if int(fit) > max_workers else ""
    return BudgetDecision(
        "workers",
        f"{workers} worker{'s' if workers != 1 else ''}: budget {format_bytes(budget_bytes)} / "
        f"({format_bytes(fresh_peak_bytes)} measured peak of a fresh worker's trial x {BUDGET_HEADROOM:g} room to "
        f"grow) = {fit:.2f}{capped}",
        {
            "workers": workers,
            "budget_bytes": budget_bytes,
            "fresh_peak_bytes": int(fresh_peak_bytes),
            "fit": round(fit, 3),
            "max_workers": max_workers,
        },
    )


def decide_budget(
    budget_bytes: int,
    *,
    predicted_peak_bytes: float | None,
    others_reserved_bytes: float,
    fresh_peak_bytes: float | None,
    others_busy: bool,
) -> BudgetDecision:
    """Whether an idle worker may start its next trial under the run's memory budget.

    Args:
        budget_bytes: the budget for the sum of every worker tree.
        predicted_peak_bytes: the worker's next trial's expected peak (:func:`next_peak_estimate`;
            None for a worker with no trial yet, which is charged ``fresh_peak_bytes``).
        others_reserved_bytes: what every other live worker holds or is expected to reach: the
            predicted peak of a running trial, the RSS of an idle worker, the fresh peak of one starting.
        fresh_peak_bytes: the highest measured peak of a fresh worker's first trial (None: unknown).
        others_busy: whether another worker is running a trial (its end will free room).
    """
    predicted = predicted_peak_bytes if predicted_peak_bytes is not None else fresh_peak_bytes
    values = {
        "budget_bytes": budget_bytes,
        "predicted_peak_bytes": None if predicted is None else int(predicted),
        "others_bytes": int(others_reserved_bytes),
        "fresh_peak_bytes": None if fresh_peak_bytes is None else int(fresh_peak_bytes),
    }
    if predicted is None or predicted + others_reserved_bytes <= budget_bytes:
        return BudgetDecision("run", "the next trial fits the budget", values)
    fresh_fits_alone = fresh_peak_bytes is not None and fresh_peak_bytes <= budget_bytes
    if predicted > budget_bytes and not fresh_fits_alone:
        peak = fresh_peak_bytes if fresh_peak_bytes is not None else predicted
        return BudgetDecision(
            "over_budget",
            f"memory_budget={format_bytes(budget_bytes)} is below one trial's measured peak "
            f"{format_bytes(peak)}: raise it above that (or make the trial smaller)",
            values,
        )
    if (
        predicted_peak_bytes is not None
        and fresh_peak_bytes is not None
        and fresh_peak_bytes < predicted
        and fresh_peak_bytes + others_reserved_bytes <= budget_bytes
    ):
        return BudgetDecision(
            "recycle",
            f"next trial's peak predicted at {format_bytes(predicted)} would take the run over its "
            f"budget {format_bytes(budget_bytes)} ({format_bytes(others_reserved_bytes)} held by the other "
            f"workers); a fresh worker's ({format_bytes(fresh_peak_bytes)}) fits",
            values,
        )
    if others_busy:
        return BudgetDecision(
            "wait",
            f"next trial's peak predicted at {format_bytes(predicted)} does not fit beside the "
            f"{format_bytes(others_reserved_bytes)} the other workers hold (budget {format_bytes(budget_bytes)}): "
            "waiting for one of them to finish",
            values,
        )
    return BudgetDecision(
        "retire",
        f"next trial's peak predicted at {format_bytes(predicted)} does not fit beside the "
        f"{format_bytes(others_reserved_bytes)} idle workers hold (budget {format_bytes(budget_bytes)}): "
        "one worker fewer",
        values,
    )


@dataclass(frozen=True, slots=True)
class BudgetKill:
    """The worker to end now because the workers' trees together are over the memory budget.

    ``alone`` is True when that worker's own tree is over the budget: no lower concurrency can make
    its trial fit, so the run stops instead of running it again.
    """

    worker_id: int
    alone: bool
    message: str
    values: dict[str, Any] = field(default_factory=dict)


def choose_budget_kill(
    budget_bytes: int,
    workers: Sequence[tuple[int, int, float | None]],
    *,
    budget_name: str = "the memory budget",
    summed: str = "the workers' trees",
) -> BudgetKill | None:
    """Which worker to kill when one sample of every worker tree sums over ``budget_bytes``.

    ``workers`` are ``(worker_id, tree_bytes, trial_elapsed_s)``, the elapsed time None for a worker
    running no trial (idle, starting, a replacement started early). The choice: among the workers
    whose tree alone is at least the excess (ending one of them brings the sum back under the budget
    by itself), the one whose kill costs least: no trial first, else the trial that started last
    (the least work lost and run again); the larger tree on a tie. When no single tree covers the
    excess, the largest tree (the next sample ends another if the sum is still over). None: the sum
    is within the budget. ``budget_name`` and ``summed`` name the budget and what is summed in the
    message (a GPU's budget sums the workers' GPU memory on it).
    """
    total = sum(tree for _, tree, _ in workers)
    if total <= budget_bytes or not workers:
        return None
    excess = total - budget_bytes
    covering = [w for w in workers if w[1] >= excess]
    if covering:
        victim = min(covering, key=lambda w: (0.0 if w[2] is None else w[2], -w[1], w[0]))
        why = (
            "it ran no trial"
            if victim[2] is None
            else f"its trial started last ({victim[2]:.1f} s ago)"
            if sum(1 for w in covering if w[2] is not None) > 1
            else f"its trial ({victim[2]:.1f} s in) was the only one whose end covers the excess"
        )
        how = f"its {format_bytes(victim[1])} alone covers the excess, and {why}"
    else:
        victim = max(workers, key=lambda w: (w[1], -w[0]))
        how = f"no single tree covers the excess; its {format_bytes(victim[1])} is the largest"
    worker_id, tree, elapsed = victim
    alone = elapsed is not None and tree > budget_bytes
    return BudgetKill(
        worker_id,
        alone,
        f"killed at {budget_name}: {summed} summed "
        + "{} > {}; ".format(*format_bytes_apart(total, budget_bytes))
        + f"worker {worker_id} was ended because {how}",
        {
            "sum_bytes": int(total),
            "budget_bytes": int(budget_bytes),
            "excess_bytes": int(excess),
            "tree_bytes": int(tree),
            "trial_elapsed_s": None if elapsed is None else round(elapsed, 3),
            "workers": len(workers),
            "alone": alone,
        },
    )


def should_prestart(
    budget_bytes: int, *, reserved_bytes: float, spare_bytes: float | None, recycle_expected: bool
) -> BudgetDecision | None:
    """Whether to start a replacement worker now (framework imported, idle) because a worker is
    expected to be recycled within two trials: ``"prestart"`` only when its idle size fits beside
    everything the live workers hold or are expected to reach, ``"no_room"`` when it does not.
    None: no recycle is expected (or nothing is known of a replacement's size)."""
    if not recycle_expected or spare_bytes is None:
        return None
    values = {
        "budget_bytes": budget_bytes,
        "reserved_bytes": int(reserved_bytes),
        "spare_bytes": int(spare_bytes),
    }
    if reserved_bytes + spare_bytes > budget_bytes:
        return BudgetDecision(
            "no_room",
            f"no replacement started early: its {format_bytes(spare_bytes)} would not fit beside the "
            f"{format_bytes(reserved_bytes)} the workers hold (budget {format_bytes(budget_bytes)}); the "
            "recycle will pay the import",
            values,
        )
    return BudgetDecision(
        "prestart",
        f"a replacement worker starts now, so the coming recycle costs no import: its "
        f"{format_bytes(spare_bytes)} fits beside the {format_bytes(reserved_bytes)} the workers hold "
        f"(budget {format_bytes(budget_bytes)})",
        {
            "budget_bytes": budget_bytes,
            "reserved_bytes": int(reserved_bytes),
            "spare_bytes": int(spare_bytes),
        },
    )


def recycle_expected_soon(policy: Policy, history: WorkerHistory, trials_ahead: int = 2) -> bool:
    """Whether :func:`decide_recycle` is expected to recycle this worker within ``trials_ahead``
    more trials, continuing its own growth (what a replacement started early would be for)."""
    rss = list(history.rss_after_bytes)
    peaks = list(history.peak_bytes)
    if history.readings < policy.min_trials_for_slope:
        return False
    slope = max(growth_per_trial(rss) or 0.0, 0.0)
    excess = max(0, peaks[-1] - rss[-1]) if peaks else 0
    n = history.trials_done
    for ahead in range(1, trials_ahead + 1):
        rss.append(int(rss[-1] + slope))
        peaks.append(int(rss[-1] + excess))
        ahead_history = WorkerHistory(
            n + ahead, tuple(rss), tuple(peaks), history.supervisor_rss_bytes, history.earlier
        )
        if decide_recycle(policy, ahead_history) is not None:
            return True
    return False


def choose_threads(
    workers: int, measured: Mapping[int, Sequence[float]], *, min_samples: int = 3
) -> BudgetDecision | None:
    """Threads per worker from measured trial durations (seconds) per thread count, once every
    candidate has ``min_samples``: the lowest median wins. None: not measured enough yet."""
    if not measured or any(len(v) < min_samples for v in measured.values()):
        return None
    medians = {threads: median(list(durations)) for threads, durations in measured.items()}
    best = min(medians, key=lambda t: (medians[t], t))
    shown = ", ".join(f"{t} thread{'s' if t != 1 else ''}: {m:.2f} s" for t, m in sorted(medians.items()))
    return BudgetDecision(
        "threads",
        f"{best} thread{'s' if best != 1 else ''} per worker with {workers} worker{'s' if workers != 1 else ''}, "
        f"by measurement (median trial, each worker's first left out: {shown})",
        {
            "threads": best,
            "workers": workers,
            "medians_s": {str(t): round(m, 4) for t, m in medians.items()},
            "samples": {str(t): len(v) for t, v in measured.items()},
        },
    )
