"""The runner's policy: when to recycle a worker, when to kill a trial, when to retry.

Every decision here is a pure function of a :class:`Policy` and recorded observations (numbers and
series), so it is tested on recorded series with no process. The supervisor only gathers the
observations and carries out what these functions return.

Recycling rules, checked after every trial, first match wins:

``max_trials``        the worker ran ``max_trials_per_worker`` trials.
``recycle_above``     its RSS after the trial is above ``recycle_above``.
``recycle_growth``    its RSS after the trial grew more than ``recycle_growth`` since its first trial.
``predictive_limit``  from its own growth per trial, the next trial's peak would cross ``memory_limit``
                      (less ``predictive_margin``): recycle now instead of being killed mid-trial.
``predictive_budget`` the next trial's peak would cross ``peak_ratio`` x the peak of the worker's first
                      trial. This is the default that keeps memory flat when the user sets nothing.
                      With ``budget_counts_supervisor`` the supervisor's own RSS (the process that
                      runs the Runner) is added to the prediction, so the whole tree stays in budget.

The growth per trial is a robust slope (Theil-Sen, as in :mod:`trainguard.leaks.stats`) so a single
noisy reading does not recycle a worker. A memory rule's decision also names why the worker grew,
from its RSS and its C allocator's bytes in use after each trial (:func:`growth_cause`): a leak
(both grew) or retention (RSS grew, bytes in use stayed flat: the allocator keeps freed memory). A
retention is first answered with ``malloc_trim(0)`` in the worker, and recycled only if RSS stays.

Out of memory (``Policy(on_oom=Shrink(...))``): a trial ended by any OOM cause (killed at
``memory_limit``/``gpu_memory_limit``, a framework OOM exception, the OS OOM killer) runs again in a
fresh worker with the named integer parameter shrunk (:func:`shrink_step`), and with ``accumulate``
the accumulation parameter grown so the effective batch stays the same. This is decided before the
``retries`` budget and does not use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from trainguard.exceptions import ConfigError
from trainguard.outcomes import ATTEMPT_STATUSES, OOM_STATUSES, RETRY_CATEGORIES
from trainguard.process import signal_name
from trainguard.runner.policy import _budget
from trainguard.runner.policy._budget import *  # noqa: F403 - the budget rules are the face's, as _budget lists them
from trainguard.runner.policy._limit_verdict import (
    LimitReading,
    LimitVerdict,
    PressureSince,
    check_limits,
    is_grace_kill,
    limit_verdict,
    pressure_verdict,
)
from trainguard.runner.policy._limits import EndCause, KillDecision, classify_end
from trainguard.runner.policy._oom import Shrink, ShrinkStep, params_without, resize, shrink_step, start_at
from trainguard.runner.policy._peaks import not_started_message, over_limit
from trainguard.runner.policy._pressure import (
    RATE_WINDOW_S,
    PressureDecision,
    decide_pressure,
    grace_expired,
    growth_rate,
    outcome_text,
    resolve_pressure_grace,
    resolve_soft_limit,
)
from trainguard.runner.policy._recycle import (
    HISTORY_KEPT,
    PREDICT_WINDOW,
    RecycleDecision,
    WorkerHistory,
    decide_recycle,
    decide_stage,
    first_recycle,
    growth_per_trial,
    predict_next_peak,
    worker_history,
)
from trainguard.runner.policy._retention import GrowthCause, SlopeInterval, growth_cause, slope_interval
from trainguard.runner.policy._retry import failure_category, should_retry
from trainguard.runner.policy._values import positive_int
from trainguard.units import parse_duration, parse_size

__all__ = [
    "Policy",
    "over_limit",
    "not_started_message",
    "Shrink",
    "ShrinkStep",
    "OOM_STATUSES",
    "shrink_step",
    "params_without",
    "resize",
    "start_at",
    "RecycleDecision",
    "KillDecision",
    "WorkerHistory",
    "worker_history",
    "HISTORY_KEPT",
    "PREDICT_WINDOW",
    "ATTEMPT_STATUSES",
    "RETRY_CATEGORIES",
    "failure_category",
    "should_retry",
    "decide_recycle",
    "decide_stage",
    "check_limits",
    "LimitReading",
    "LimitVerdict",
    "PressureSince",
    "limit_verdict",
    "is_grace_kill",
    "pressure_verdict",
    "growth_per_trial",
    "predict_next_peak",
    "first_recycle",
    "GrowthCause",
    "SlopeInterval",
    "growth_cause",
    "slope_interval",
    "EndCause",
    "classify_end",
    *_budget.__all__,
    "signal_name",
    "PressureDecision",
    "RATE_WINDOW_S",
    "decide_pressure",
    "grace_expired",
    "growth_rate",
    "outcome_text",
]


@dataclass(frozen=True, slots=True)
class Policy:
    """What the supervisor does with workers and trials. Sizes accept ``"4GB"``-style strings and
    durations ``"30s"``-style strings; they are stored as bytes and seconds.

    Args:
        max_trials_per_worker: recycle a worker after this many trials (None: no count limit).
        recycle_above: recycle a worker whose tree RSS after a trial is above this size.
        recycle_growth: recycle a worker whose RSS after a trial grew this much since its first trial.
        predictive: recycle before the next trial is predicted to cross ``memory_limit`` or the
            ``peak_ratio`` budget, from the worker's own growth per trial.
        peak_ratio: the default budget of predictive recycling: a worker's next trial must stay under
            ``peak_ratio`` x the peak of its first trial (which includes the framework import).
            None turns the budget off, so workers grow up to ``memory_limit`` only.
        budget_counts_supervisor: the ``peak_ratio`` budget also pays for the supervisor's own
            process (the one that runs the Runner): a worker is recycled when its predicted next
            peak plus that process's RSS would cross ``peak_ratio`` x its first trial's peak. For
            when the reference is the whole job in one process, as for ``trainguard.optuna``,
            where the supervisor's process is the study's. None (default): the caller decides; a
            Runner leaves it out (that process is your program, its memory yours), and
            ``trainguard.optuna`` counts it. The supervisor is counted for at most half the
            budget's headroom, so a worker whose first trial is small next to it still gets room
            to grow instead of being recycled after every trial.
        predictive_margin: the fraction of ``memory_limit`` kept free by predictive recycling.
        min_trials_for_slope: readings needed before the growth per trial is trusted.
        memory_limit: hard limit on the worker tree's RSS: the tree is killed when a sample crosses it.
        gpu_memory_limit: hard limit on the worker tree's GPU memory (NVML, by pid).
        timeout: hard limit on one trial's duration, in seconds; the tree is killed past it.
        retries: how many times a failed trial is tried again (0: never).
        retry_on: which failures are retried: any of "crash", "memory", "timeout", "exception".
        on_error: "continue" runs the other trials after a failed one; "stop" stops dispatching.
        max_stages_per_worker: a staged trial (``def train(params, ctx)`` calling ``ctx.checkpoint``)
            leaves its worker after this many stages in it, and a fresh worker resumes it from the
            checkpoint (None: no count limit; the predictive rules above still apply per stage).
        on_oom: a :class:`Shrink` rule (or its CLI text ``"shrink:batch_size,factor=0.5"``): an
            out-of-memory trial reruns in a fresh worker with a smaller size. None: OOM is a failure
            like any other (``retry_on`` "memory" retries it unchanged).
        soft_limit: a size under ``memory_limit`` (``"450MB"``) or a fraction of it (``0.65``,
            ``"65%"``): a trial whose tree crosses it, or is predicted to cross ``memory_limit``
            within ``pressure_horizon`` at its current rate, is asked to checkpoint
            (``ctx.under_pressure``, ``ctx.on_pressure``); one that does is carried on from that
            checkpoint in a fresh worker. ``memory_limit`` applies throughout, as without it.
        pressure_grace: how long a trial under pressure may run on without checkpointing before it
            is ended (as ``killed_memory``, retried like one). None (default): only
            ``memory_limit`` ends it.
        pressure_horizon: how far ahead a predicted crossing of ``memory_limit`` counts as pressure.
        predict_peaks: fit each trial's peak on its numeric params from the trials already finished
            (this run's own, its earlier sessions' included; another run's only when the run names
            it, ``Runner.map(..., predict_from="other-run")``) and act on it: a trial whose
            predicted interval lies wholly over ``memory_limit`` is not started
            (``predicted_over_limit``), with ``on_oom`` it starts at a size predicted to fit, and
            under a ``memory_budget`` each trial is admitted by its own predicted peak, the largest
            that fits first. The model is fitted only where it can decide (a memory limit, an ``on_oom``
            rule or a budget). False: no model.

    Raises:
        ConfigError: a value out of range or of the wrong kind (UnitError for a bad size or duration).
    """

    max_trials_per_worker: int | None = None
    recycle_above: int | None = None
    recycle_growth: int | None = None
    predictive: bool = True
    peak_ratio: float | None = 1.2
    budget_counts_supervisor: bool | None = None
    predictive_margin: float = 0.05
    min_trials_for_slope: int = 3
    memory_limit: int | None = None
    gpu_memory_limit: int | None = None
    timeout: float | None = None
    retries: int = 0
    retry_on: tuple[str, ...] = ("crash", "memory", "timeout")
    on_error: Literal["continue", "stop"] = "continue"
    on_oom: Shrink | None = None
    max_stages_per_worker: int | None = None
    soft_limit: int | float | str | None = None
    pressure_grace: float | str | None = None
    pressure_horizon: float | str = 3.0
    predict_peaks: bool = True

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if isinstance(self.on_oom, str):
            put("on_oom", Shrink.parse(self.on_oom))
        elif self.on_oom is not None and not isinstance(self.on_oom, Shrink):
            raise ConfigError(
                f"on_oom must be a trainguard.Shrink(...) or None, not {type(self.on_oom).__name__}"
            )

        if not isinstance(self.predict_peaks, bool):
            raise ConfigError(f"predict_peaks must be True or False, not {self.predict_peaks!r}")
        if self.max_stages_per_worker is not None:
            put("max_stages_per_worker", positive_int(self.max_stages_per_worker, "max_stages_per_worker"))
        if self.max_trials_per_worker is not None:
            put("max_trials_per_worker", positive_int(self.max_trials_per_worker, "max_trials_per_worker"))
        for name in ("recycle_above", "recycle_growth", "memory_limit", "gpu_memory_limit"):
            value = parse_size(getattr(self, name), name=name, allow_none=True)
            if value == 0:
                raise ConfigError(
                    f"{name}=0 would stop every trial: give a size such as '4GB', or None for no limit"
                )
            put(name, value)
        put("timeout", parse_duration(self.timeout, name="timeout", allow_none=True))
        if self.timeout == 0:
            raise ConfigError("timeout=0 would kill every trial: give a duration such as '10m', or None")
        if not isinstance(self.predictive, bool):
            raise ConfigError(f"predictive must be True or False, not {self.predictive!r}")
        if self.budget_counts_supervisor is not None and not isinstance(self.budget_counts_supervisor, bool):
            raise ConfigError(
                f"budget_counts_supervisor must be True, False or None, not {self.budget_counts_supervisor!r}"
            )
        if self.peak_ratio is not None:
            if (
                isinstance(self.peak_ratio, bool)
                or not isinstance(self.peak_ratio, (int, float))
                or not (math.isfinite(self.peak_ratio) and self.peak_ratio > 1.0)
            ):
                raise ConfigError(
                    f"peak_ratio={self.peak_ratio!r} must be a number above 1.0 such as 1.2, or None"
                )
            put("peak_ratio", float(self.peak_ratio))
        if not isinstance(self.predictive_margin, (int, float)) or not 0.0 <= self.predictive_margin < 0.5:
            raise ConfigError(
                f"predictive_margin={self.predictive_margin!r} must be in [0, 0.5), such as 0.05"
            )
        put(
            "min_trials_for_slope",
            positive_int(self.min_trials_for_slope, "min_trials_for_slope", minimum=2),
        )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"retries={self.retries!r} must be a whole number >= 0, such as 2")
        retry_on = (self.retry_on,) if isinstance(self.retry_on, str) else tuple(self.retry_on)
        unknown = [r for r in retry_on if r not in RETRY_CATEGORIES]
        if unknown:
            raise ConfigError(
                f"retry_on has unknown {unknown[0]!r}: use any of {', '.join(RETRY_CATEGORIES)}"
            )
        put("retry_on", retry_on)
        if self.on_error not in ("continue", "stop"):
            raise ConfigError(f"on_error={self.on_error!r} must be 'continue' or 'stop'")
        put("soft_limit", resolve_soft_limit(self.soft_limit, self.memory_limit))
        put("pressure_grace", resolve_pressure_grace(self.pressure_grace))
        horizon = parse_duration(self.pressure_horizon, name="pressure_horizon")
        if horizon < 0:
            raise ConfigError(
                f"pressure_horizon={self.pressure_horizon!r} must be a duration >= 0 such as '3s'"
            )
        put("pressure_horizon", horizon)

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-ready data (for the store).

        Returns:
            Every field, sizes in bytes and durations in seconds.
        """
        out = {name: getattr(self, name) for name in _FIELDS}
        out["retry_on"] = list(self.retry_on)
        out["on_oom"] = self.on_oom.to_dict() if self.on_oom is not None else None
        return out


_FIELDS = tuple(Policy.__dataclass_fields__)
