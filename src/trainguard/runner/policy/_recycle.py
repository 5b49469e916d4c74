"""Recycling, pure: after each trial (or stage), whether the worker is replaced, and why.

Rules, first match wins: ``max_trials``, ``recycle_above``, ``recycle_growth``, then the predictive
ones (``predictive_limit``, ``predictive_budget``) from the worker's own robust growth per trial.

When a memory rule fires (any but ``max_trials``), the decision also names why the worker grew, from
its RSS and its allocator's bytes in use after each trial (:func:`growth_cause`): ``"leak"`` (both
grew), ``"retention"`` (RSS grew, bytes in use stayed flat: the allocator keeps freed memory) or
None (too few readings, or no clear cause). A retention decision of ``recycle_above`` or
``recycle_growth`` (:data:`TRIM_RULES`) asks first for a ``malloc_trim(0)`` in the worker
(``trim_first``); the supervisor then decides again with the RSS after it as the latest reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import ConfigError
from trainguard.outcomes import WorkerReason
from trainguard.runner.policy._retention import growth_cause
from trainguard.runner.policy._values import median
from trainguard.units import format_bytes, format_bytes_apart

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy

__all__ = [
    "WorkerHistory",
    "RecycleDecision",
    "SLOPE_WINDOW",
    "growth_per_trial",
    "predict_next_peak",
    "worker_history",
    "HISTORY_KEPT",
    "PREDICT_WINDOW",
    "decide_recycle",
    "decide_stage",
    "TRIM_RULES",
    "first_recycle",
]


@dataclass(frozen=True, slots=True)
class WorkerHistory:
    """What the supervisor knows about one worker at a trial boundary.

    ``rss_after_bytes[i]`` is the worker tree's RSS right after its trial ``i``; ``peak_bytes[i]`` is
    the tree's peak during that trial (it includes the framework import for trial 0);
    ``supervisor_rss_bytes`` the supervisor's own process RSS now (read only when the policy's
    ``budget_counts_supervisor`` asks for it; 0 otherwise).
    """

    trials_done: int
    rss_after_bytes: tuple[int, ...] = ()
    peak_bytes: tuple[int, ...] = ()
    supervisor_rss_bytes: int = 0
    #: readings left out between the first and the kept latest ones (:func:`worker_history`): the
    #: reading at position ``k >= 1`` is the worker's trial ``k + earlier``
    earlier: int = 0
    #: the C allocator's bytes in use after each trial, aligned with ``rss_after_bytes`` (None where
    #: it had no reading; empty where none is known)
    bytes_in_use: tuple[int | None, ...] = ()
    #: the latest RSS reading is the one after a ``malloc_trim(0)`` the supervisor asked for after
    #: that trial (a decision made again on it: no second trim)
    trimmed: bool = False

    @property
    def readings(self) -> int:
        """How many trials' readings the worker has, the left-out ones included."""
        return len(self.rss_after_bytes) + self.earlier


#: Latest readings a :class:`WorkerHistory` keeps besides the first (which the growth and
#: peak-ratio rules compare against): every rule looks at no more than these, so a decision costs
#: the same at trial 100,000 as at trial 300.
HISTORY_KEPT = 256


def worker_history(
    trials_done: int,
    rss_after_bytes: Sequence[int],
    peak_bytes: Sequence[int],
    supervisor_rss_bytes: int = 0,
    bytes_in_use: Sequence[int | None] = (),
) -> WorkerHistory:
    """The :class:`WorkerHistory` of a worker's full readings: the first and the latest
    :data:`HISTORY_KEPT`, in time that does not grow with the worker's length of service."""
    leave_out = max(0, len(rss_after_bytes) - 1 - HISTORY_KEPT)
    if not leave_out:
        return WorkerHistory(
            trials_done,
            tuple(rss_after_bytes),
            tuple(peak_bytes),
            supervisor_rss_bytes,
            bytes_in_use=tuple(bytes_in_use),
        )

    def kept(values: Sequence[Any]) -> tuple[Any, ...]:
        return (values[0], *values[-HISTORY_KEPT:]) if len(values) > HISTORY_KEPT + 1 else tuple(values)

    return WorkerHistory(
        trials_done,
        kept(rss_after_bytes),
        kept(peak_bytes),
        supervisor_rss_bytes,
        leave_out,
        kept(bytes_in_use),
    )


@dataclass(frozen=True, slots=True)
class RecycleDecision:
    """Recycle the worker: ``rule`` names which rule fired, ``values`` the numbers it saw.

    ``cause`` is why a memory rule's worker grew (``"leak"``, ``"retention"``, or None when unknown
    or not a memory rule); ``trim_first`` asks the supervisor to try ``malloc_trim(0)`` in the
    worker and decide again before recycling it (a retention not yet trimmed).
    """

    rule: str
    values: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    cause: str | None = None
    trim_first: bool = False

    @property
    def reason(self) -> WorkerReason:
        """The worker's end reason for this recycle (the store's word; the cause goes in its detail)."""
        return WorkerReason.RECYCLED


#: The rules a ``malloc_trim(0)`` can answer: they read the RSS the worker holds now, which a trim
#: lowers; the predictive ones read the next trial's peak, which it does not.
TRIM_RULES = frozenset({"recycle_above", "recycle_growth"})

#: Readings the growth slope looks at: the worker's latest trials (Theil-Sen is quadratic in them).
SLOPE_WINDOW = 32

#: Readings the predicted level and a trial's typical excess over its RSS look at (medians).
PREDICT_WINDOW = 128


def growth_per_trial(rss_after_bytes: Sequence[int]) -> float | None:
    """The robust growth per trial of a worker (bytes per trial), or None with under two readings.

    The Theil-Sen slope (median of all pairwise slopes) of the latest :data:`SLOPE_WINDOW` readings,
    the same estimator as :func:`trainguard.leaks.stats.theil_sen`; computed here in plain Python
    so the supervisor does not import numpy and scipy for a few dozen numbers. A single spike moves
    it little.
    """
    values = [float(v) for v in rss_after_bytes[-SLOPE_WINDOW:]]
    n = len(values)
    if n < 2:
        return None
    slopes = [(values[j] - values[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    return median(slopes)


def predict_next_peak(history: WorkerHistory) -> float | None:
    """The predicted peak of the worker's next trial, or None when there are too few readings.

    The level is fitted robustly (median of ``rss - slope * i``) so that one high reading does not
    move it; the peak is that level one trial ahead plus the typical excess of a trial's peak over
    the RSS it leaves behind.
    """
    rss = history.rss_after_bytes
    slope = growth_per_trial(rss)
    if slope is None:
        return None
    slope = max(slope, 0.0)
    n = history.readings
    # the latest PREDICT_WINDOW readings, each at its trial number: a median over the whole
    # history made every decision slower as the worker aged (45 ms a trial at 15,000 trials)
    start = max(0, len(rss) - PREDICT_WINDOW)
    level = median([rss[k] - slope * (k + history.earlier if k else 0) for k in range(start, len(rss))])
    next_after = level + slope * n
    excess = 0.0
    if history.peak_bytes:
        peaks = history.peak_bytes
        pairs = list(zip(peaks[max(1, start) :], rss[max(1, start) :], strict=False)) or list(
            zip(peaks, rss, strict=False)
        )
        excess = max(0.0, median([p - r for p, r in pairs]))
    return next_after + excess


def decide_recycle(policy: Policy, history: WorkerHistory) -> RecycleDecision | None:
    """Whether to recycle a worker after its latest trial; None keeps it. First matching rule wins;
    a memory rule's decision names the cause of the growth (see the module's docstring)."""
    decision = _first_rule(policy, history)
    if decision is None or decision.rule == "max_trials":
        return decision
    cause = growth_cause(history.rss_after_bytes, history.bytes_in_use)
    if cause is None:
        return decision
    return replace(
        decision,
        values={**decision.values, **cause.values()},
        message=f"{decision.message}; {cause.words}",
        cause=cause.kind,
        trim_first=cause.kind == "retention" and not history.trimmed and decision.rule in TRIM_RULES,
    )


def _first_rule(policy: Policy, history: WorkerHistory) -> RecycleDecision | None:
    n = history.trials_done
    rss = history.rss_after_bytes
    last = rss[-1] if rss else None
    if policy.max_trials_per_worker is not None and n >= policy.max_trials_per_worker:
        return RecycleDecision(
            "max_trials",
            {"trials_done": n, "max_trials_per_worker": policy.max_trials_per_worker},
            f"ran {n} trials (max_trials_per_worker={policy.max_trials_per_worker})",
        )
    if policy.recycle_above is not None and last is not None and last > policy.recycle_above:
        return RecycleDecision(
            "recycle_above",
            {"rss_bytes": last, "recycle_above": policy.recycle_above},
            f"RSS {format_bytes_apart(last, policy.recycle_above)[0]} after trial {n} is above recycle_above={format_bytes_apart(last, policy.recycle_above)[1]}",
        )
    if policy.recycle_growth is not None and len(rss) >= 2:
        growth = rss[-1] - rss[0]
        if growth > policy.recycle_growth:
            return RecycleDecision(
                "recycle_growth",
                {"growth_bytes": growth, "recycle_growth": policy.recycle_growth, "trials_done": n},
                f"RSS grew {format_bytes(growth)} since its first trial "
                f"(recycle_growth={format_bytes(policy.recycle_growth)})",
            )
    return _predictive(policy, history, "trial")


def decide_stage(policy: Policy, history: WorkerHistory) -> RecycleDecision | None:
    """Whether a worker running a staged trial leaves at the checkpoint it just committed (a fresh
    worker resumes the trial there); None lets it run the next stage.

    ``history`` counts this worker's stages (``trials_done`` is the number of stages it ran): RSS
    after each checkpoint and the peak during each stage. Rules: ``max_stages_per_worker``, then
    the predictive ones of :func:`decide_recycle`, one stage ahead instead of one trial.
    """
    n = history.trials_done
    if policy.max_stages_per_worker is not None and n >= policy.max_stages_per_worker:
        return RecycleDecision(
            "max_stages",
            {"stages_done": n, "max_stages_per_worker": policy.max_stages_per_worker},
            f"ran {n} stages (max_stages_per_worker={policy.max_stages_per_worker})",
        )
    return _predictive(policy, history, "stage")


def _predictive(policy: Policy, history: WorkerHistory, unit: str) -> RecycleDecision | None:
    n = history.trials_done
    rss = history.rss_after_bytes
    last = rss[-1] if rss else None
    if not policy.predictive or not rss:
        return None
    # (rule, threshold, label, bytes outside the worker's tree that the threshold also pays for)
    limits: list[tuple[str, float, str, float]] = []
    if policy.memory_limit is not None:
        limits.append(
            ("predictive_limit", policy.memory_limit * (1.0 - policy.predictive_margin), "memory_limit", 0.0)
        )
    if policy.peak_ratio is not None and history.peak_bytes:
        first = history.peak_bytes[0]
        outside = 0.0
        label = f"peak_ratio budget (x its first {unit}'s peak)"
        if policy.budget_counts_supervisor and history.supervisor_rss_bytes > 0:
            # at most half the headroom: a fresh worker could never pay for more than the headroom
            outside = min(float(history.supervisor_rss_bytes), (policy.peak_ratio - 1.0) * first / 2.0)
            label = f"peak_ratio budget (x its first {unit}'s peak, less the supervisor's {format_bytes(outside)})"
        limits.append(("predictive_budget", policy.peak_ratio * first, label, outside))
    if not limits:
        return None
    if history.readings >= policy.min_trials_for_slope:
        predicted = predict_next_peak(history)
        basis = "predicted"
    else:
        # too few readings to trust a slope: only react to a peak already over the line
        predicted = float(max(history.peak_bytes[-1] if history.peak_bytes else 0, last or 0))
        basis = "observed"
    if predicted is None:
        return None
    for rule, threshold, label, outside in limits:
        if predicted + outside > threshold:
            slope = growth_per_trial(rss)
            values = {
                "predicted_peak_bytes": int(predicted),
                "threshold_bytes": int(threshold),
                "growth_per_trial_bytes": None if slope is None else int(slope),
                "basis": basis,
                f"{unit}s_done": n,
            }
            if outside:
                values["supervisor_counted_bytes"] = int(outside)
            shown = format_bytes_apart(predicted, threshold - outside)
            return RecycleDecision(
                rule,
                values,
                f"next {unit}'s peak {basis} at {shown[0]} would cross the {label} "
                f"{shown[1]} (growth {format_bytes(slope or 0, signed=True)}/{unit})",
            )
    return None


def first_recycle(
    policy: Policy,
    rss_after_bytes: Sequence[int],
    peak_bytes: Sequence[int],
    bytes_in_use: Sequence[int | None] | None = None,
) -> tuple[int, RecycleDecision] | None:
    """Replay one worker's recorded per-trial series through :func:`decide_recycle`.

    Returns ``(trials_done, decision)`` at the first trial after which the worker would have been
    recycled, or None if it never would. A tool for tests and for tuning a policy offline.
    ``bytes_in_use`` (the allocator's, one per trial) lets the decision name the growth's cause; a
    retention decision comes with ``trim_first`` (live, the supervisor tries ``malloc_trim(0)`` first).
    """
    if len(rss_after_bytes) != len(peak_bytes):
        raise ConfigError("rss_after_bytes and peak_bytes must have one reading per trial each")
    if bytes_in_use is not None and len(bytes_in_use) != len(rss_after_bytes):
        raise ConfigError(
            "bytes_in_use must have one reading per trial, as rss_after_bytes has (None where there was none)"
        )
    in_use = tuple(bytes_in_use or ())
    for n in range(1, len(rss_after_bytes) + 1):
        history = WorkerHistory(n, tuple(rss_after_bytes[:n]), tuple(peak_bytes[:n]), bytes_in_use=in_use[:n])
        decision = decide_recycle(policy, history)
        if decision is not None:
            return n, decision
    return None
