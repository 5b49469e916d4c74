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
noisy reading does not recycle a worker.

Out of memory (``Policy(on_oom=Shrink(...))``): a trial ended by any OOM cause (killed at
``memory_limit``/``gpu_memory_limit``, a framework OOM exception, the OS OOM killer) runs again in a
fresh worker with the named integer parameter shrunk (:func:`shrink_step`), and with ``accumulate``
the accumulation parameter grown so the effective batch stays the same. This is decided before the
``retries`` budget and does not use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainguard.exceptions import ConfigError
from trainguard.proctree import signal_name
from trainguard.units import format_bytes, format_bytes_apart, parse_duration, parse_size

__all__ = [
    "Policy",
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
    "ATTEMPT_STATUSES",
    "RETRY_CATEGORIES",
    "failure_category",
    "should_retry",
    "decide_recycle",
    "decide_stage",
    "check_limits",
    "growth_per_trial",
    "predict_next_peak",
    "first_recycle",
    "EndCause",
    "classify_end",
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
    "signal_name",
]

#: Attempt statuses that mean "out of memory", whatever noticed it.
OOM_STATUSES = ("framework_oom", "os_oom", "killed_memory", "killed_gpu_memory")
#: Families of failures that ``retry_on`` names.
RETRY_CATEGORIES = ("crash", "memory", "timeout", "exception")

_CATEGORY = {
    "exception": "exception",
    "framework_oom": "memory",
    "os_oom": "memory",
    "killed_memory": "memory",
    "killed_gpu_memory": "memory",
    # killed because the workers' trees together crossed the run's memory_budget: the pool's doing
    # when others ran beside it (run again at lower concurrency without using ``retries``)
    "killed_budget": "memory",
    "crashed": "crash",
    "timeout": "timeout",
    # a result that cannot be serialized fails the same way every time: never retried
    "not_serializable": None,
    "result_too_large": None,
    # a staged trial's worker stopped at a checkpoint to shed memory: the trial goes on, not a failure
    "staged": None,
    # the trial wrote onto its worker's message channel: deterministic, never retried
    "protocol_error": None,
    "ok": None,
}
#: Outcome of one attempt, as recorded in the store (the store validates against the same set; a
#: test checks that the two agree, so that this pure module need not import the store).
ATTEMPT_STATUSES = tuple(_CATEGORY)


@dataclass(frozen=True, slots=True)
class Shrink:
    """Out-of-memory recovery: rerun the trial in a fresh worker with an integer parameter shrunk.

    ``Policy(on_oom=Shrink("batch_size", factor=0.5, minimum=1, accumulate="grad_accum"))``: a trial
    that ends by any out-of-memory cause runs again in a new worker (the one that ran out of memory
    is never reused) with ``batch_size`` times ``factor`` (at least 1 smaller, never under
    ``minimum``). With ``accumulate``, that parameter (default 1 when absent) grows so that
    ``batch_size x accumulate``, the effective batch, stays the same: the new size is the largest
    divisor of the effective batch at or under ``size x factor`` when there is one. The size that
    worked is remembered in the store per (function, params without these two keys, device and
    limits), and later trials and runs start there.

    Args:
        key: the integer parameter to shrink (``"batch_size"``).
        factor: the shrink factor per out-of-memory attempt, in (0, 1).
        minimum: the smallest size tried; an OOM there fails the trial.
        accumulate: the gradient-accumulation parameter the trial function reads, or None.
        mixed_precision: before the first shrink, retry at the same size with Keras's
            ``mixed_float16`` global policy set in the fresh worker (kept for later attempts).
        max_attempts: the most out-of-memory attempts one trial gets (shrinks included).
        remember: read and write the remembered size in the store.

    Raises:
        ConfigError: a value of the wrong kind or out of range.
    """

    key: str = "batch_size"
    factor: float = 0.5
    minimum: int = 1
    accumulate: str | None = None
    mixed_precision: bool = False
    max_attempts: int = 12
    remember: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise ConfigError(f"Shrink key={self.key!r} must name an integer parameter, such as 'batch_size'")
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or not (math.isfinite(self.factor) and 0.0 < self.factor < 1.0)
        ):
            raise ConfigError(
                f"Shrink factor={self.factor!r} must be between 0 and 1 (exclusive), such as 0.5"
            )
        object.__setattr__(self, "factor", float(self.factor))
        _positive_int(self.minimum, "Shrink minimum")
        if self.accumulate is not None and (not isinstance(self.accumulate, str) or not self.accumulate):
            raise ConfigError(
                f"Shrink accumulate={self.accumulate!r} must name a parameter such as 'grad_accum', or None"
            )
        if self.accumulate == self.key:
            raise ConfigError(f"Shrink accumulate={self.accumulate!r} must differ from key={self.key!r}")
        if not isinstance(self.mixed_precision, bool):
            raise ConfigError(f"Shrink mixed_precision={self.mixed_precision!r} must be True or False")
        _positive_int(self.max_attempts, "Shrink max_attempts")
        if not isinstance(self.remember, bool):
            raise ConfigError(f"Shrink remember={self.remember!r} must be True or False")

    @classmethod
    def parse(cls, text: str) -> Shrink:
        """``"shrink:batch_size,factor=0.5,minimum=1,accumulate=grad_accum,mixed_precision"`` (CLI form).

        Raises:
            ConfigError: not that form, an unknown option, or a bad value.
        """
        example = "shrink:batch_size,factor=0.5,minimum=1,accumulate=grad_accum"
        head, sep, rest = str(text).partition(":")
        parts = [p.strip() for p in rest.split(",")] if sep else []
        if head.strip() != "shrink" or not parts or not parts[0] or "=" in parts[0]:
            raise ConfigError(f"--on-oom {text!r} is not understood: use e.g. '{example}'")
        kwargs: dict[str, Any] = {"key": parts[0]}
        for part in parts[1:]:
            name, eq, value = part.partition("=")
            name = name.strip()
            try:
                if name == "mixed_precision" and not eq:
                    kwargs[name] = True
                elif name == "mixed_precision":
                    kwargs[name] = {"true": True, "false": False, "1": True, "0": False}[value.lower()]
                elif name == "factor":
                    kwargs[name] = float(value)
                elif name in ("minimum", "max_attempts"):
                    kwargs[name] = int(value)
                elif name == "accumulate" and value:
                    kwargs[name] = value
                else:
                    raise KeyError(name)
            except (KeyError, ValueError):
                raise ConfigError(
                    f"--on-oom option {part!r} is not understood: options are factor=, minimum=, accumulate=, "
                    f"max_attempts=, mixed_precision (e.g. '{example}')"
                ) from None
        return cls(**kwargs)

    def check_params(self, params: Any, where: str = "params") -> None:
        """Say in one line what is wrong with ``params`` for this rule, before anything runs.

        Raises:
            ConfigError: the key is missing or not a whole number, ``minimum`` is above the
                starting size, or the accumulation parameter is not a whole number >= 1.
        """
        if self.key not in params:
            keys = ", ".join(sorted(params)) or "none"
            raise ConfigError(
                f"on_oom Shrink key {self.key!r} is not in {where} (its keys: {keys}): "
                f"name the batch-size parameter the trial reads"
            )
        size = params[self.key]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(
                f"on_oom Shrink key {self.key!r} is {size!r} in {where}: it must be a whole number >= 1 "
                f"to be shrunk, such as 64"
            )
        if self.minimum > size:
            raise ConfigError(
                f"on_oom Shrink minimum={self.minimum} is above the starting {self.key}={size} in {where}: "
                f"lower minimum or start larger"
            )
        if self.accumulate is not None and self.accumulate in params:
            acc = params[self.accumulate]
            if isinstance(acc, bool) or not isinstance(acc, int) or acc < 1:
                raise ConfigError(
                    f"on_oom Shrink accumulate {self.accumulate!r} is {acc!r} in {where}: "
                    f"it must be a whole number >= 1, such as 1"
                )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in Shrink.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class ShrinkStep:
    """What the next attempt of an out-of-memory trial runs with.

    ``params`` are the next attempt's params; ``size``/``accumulation`` its values of the rule's keys
    (``accumulation`` None without ``accumulate``); ``effective_batch`` is size x accumulation;
    ``mixed_precision`` whether the attempt sets Keras's ``mixed_float16`` policy first.
    """

    params: dict[str, Any]
    size: int
    previous_size: int
    accumulation: int | None
    previous_accumulation: int | None
    effective_batch: int
    previous_effective_batch: int
    mixed_precision: bool
    message: str


def _accumulation(rule: Shrink, params: dict[str, Any]) -> int | None:
    if rule.accumulate is None:
        return None
    return int(params.get(rule.accumulate, 1))


def resize(rule: Shrink, params: dict[str, Any], size: int) -> dict[str, Any]:
    """``params`` with the rule's key set to ``size`` and, with ``accumulate``, the accumulation set
    so the effective batch stays (exactly when ``size`` divides it, else rounded up)."""
    out = dict(params)
    old = int(params[rule.key])
    out[rule.key] = int(size)
    acc = _accumulation(rule, params)
    if acc is not None and rule.accumulate is not None:
        effective = old * acc
        out[rule.accumulate] = max(1, -(-effective // int(size)))
    return out


def start_at(rule: Shrink, params: dict[str, Any], size: int) -> dict[str, Any]:
    """``params`` started at a remembered ``size``: with ``accumulate``, the largest divisor of the
    effective batch at or under ``size`` (not under ``minimum``), so the effective batch stays exact."""
    size = max(int(size), rule.minimum)
    acc = _accumulation(rule, params)
    if acc is not None:
        effective = int(params[rule.key]) * acc
        divisors = [d for d in range(min(size, effective), rule.minimum - 1, -1) if effective % d == 0]
        if divisors:
            size = divisors[0]
    return resize(rule, params, size)


def shrink_step(
    rule: Shrink, params: dict[str, Any], *, mixed_precision_on: bool = False
) -> ShrinkStep | None:
    """The next attempt after an out-of-memory one that ran with ``params``; None when the size is
    already at the rule's minimum (and mixed precision, if opted into, is already on)."""
    size = int(params[rule.key])
    acc = _accumulation(rule, params)
    effective = size * (acc or 1)
    if rule.mixed_precision and not mixed_precision_on:
        return ShrinkStep(
            dict(params),
            size,
            size,
            acc,
            acc,
            effective,
            effective,
            True,
            f"retrying at {rule.key}={size} with Keras mixed_float16",
        )
    if size <= rule.minimum:
        return None
    target = max(rule.minimum, int(size * rule.factor))
    if target >= size:
        target = size - 1
    new_size = target
    if acc is not None:
        divisors = [d for d in range(target, rule.minimum - 1, -1) if effective % d == 0]
        if divisors:
            new_size = divisors[0]
    new_params = resize(rule, params, new_size)
    new_acc = _accumulation(rule, new_params)
    new_effective = new_size * (new_acc or 1)
    words = f"{rule.key}={new_size}"
    if new_acc is not None:
        words += f", {rule.accumulate}={new_acc} (effective batch {new_effective}"
        words += ")" if new_effective == effective else f", was {effective}: {new_size} does not divide it)"
    return ShrinkStep(
        new_params,
        new_size,
        size,
        new_acc,
        acc,
        new_effective,
        effective,
        mixed_precision_on,
        f"retrying in a fresh worker with {words}",
    )


def params_without(params: dict[str, Any], keys: Sequence[str | None]) -> str:
    """Canonical JSON of ``params`` less ``keys``: what a remembered size is looked up by."""
    import json

    rest = {k: v for k, v in params.items() if k not in keys}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), default=str)


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

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if isinstance(self.on_oom, str):
            put("on_oom", Shrink.parse(self.on_oom))
        elif self.on_oom is not None and not isinstance(self.on_oom, Shrink):
            raise ConfigError(
                f"on_oom must be a trainguard.Shrink(...) or None, not {type(self.on_oom).__name__}"
            )

        if self.max_stages_per_worker is not None:
            put("max_stages_per_worker", _positive_int(self.max_stages_per_worker, "max_stages_per_worker"))
        if self.max_trials_per_worker is not None:
            put("max_trials_per_worker", _positive_int(self.max_trials_per_worker, "max_trials_per_worker"))
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
            _positive_int(self.min_trials_for_slope, "min_trials_for_slope", minimum=2),
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

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-ready data (for the store)."""
        out = {name: getattr(self, name) for name in _FIELDS}
        out["retry_on"] = list(self.retry_on)
        out["on_oom"] = self.on_oom.to_dict() if self.on_oom is not None else None
        return out


_FIELDS = tuple(Policy.__dataclass_fields__)


def _positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}={value!r} must be a whole number >= {minimum}, such as 8")
    return value


# --------------------------------------------------------------------------------------------------
# observations and decisions


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


@dataclass(frozen=True, slots=True)
class RecycleDecision:
    """Recycle the worker: ``rule`` names which rule fired, ``values`` the numbers it saw."""

    rule: str
    values: dict[str, Any] = field(default_factory=dict)
    message: str = ""


@dataclass(frozen=True, slots=True)
class KillDecision:
    """Kill the trial's process tree now. ``status`` is the attempt status to record."""

    status: Literal["killed_memory", "killed_gpu_memory", "killed_budget", "timeout"]
    limit: float
    value: float
    message: str


def failure_category(status: str) -> str | None:
    """The ``retry_on`` family of an attempt status (None for "ok" and never-retried failures)."""
    try:
        return _CATEGORY[status]
    except KeyError:
        raise ConfigError(
            f"unknown attempt status {status!r}: one of {', '.join(ATTEMPT_STATUSES)}"
        ) from None


def should_retry(policy: Policy, status: str, attempts: int) -> bool:
    """Whether a trial whose latest attempt (the ``attempts``-th) ended with ``status`` runs again."""
    category = failure_category(status)
    return category is not None and category in policy.retry_on and attempts <= policy.retries


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


#: Readings the growth slope looks at: the worker's latest trials (Theil-Sen is quadratic in them).
SLOPE_WINDOW = 32


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
    return _median(slopes)


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
    n = len(rss)
    level = _median([r - slope * i for i, r in enumerate(rss)])
    next_after = level + slope * n
    excess = 0.0
    if history.peak_bytes:
        pairs = list(zip(history.peak_bytes[1:], rss[1:], strict=False)) or list(
            zip(history.peak_bytes, rss, strict=False)
        )
        excess = max(0.0, _median([p - r for p, r in pairs]))
    return next_after + excess


def decide_recycle(policy: Policy, history: WorkerHistory) -> RecycleDecision | None:
    """Whether to recycle a worker after its latest trial; None keeps it. First matching rule wins."""
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
    if len(rss) >= policy.min_trials_for_slope:
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


def check_limits(
    policy: Policy, *, rss_bytes: int | None, gpu_bytes: int | None, elapsed_s: float | None
) -> KillDecision | None:
    """Whether a running trial must be killed now, from one sample of its tree."""
    memory: tuple[tuple[Literal["killed_memory", "killed_gpu_memory"], int | None, int | None, str], ...] = (
        ("killed_memory", policy.memory_limit, rss_bytes, "memory_limit: tree RSS"),
        ("killed_gpu_memory", policy.gpu_memory_limit, gpu_bytes, "gpu_memory_limit: GPU memory"),
    )
    for status, limit, value, words in memory:
        if limit is not None and value is not None and value > limit:
            return KillDecision(
                status, limit, value, "killed at {} {} > {}".format(words, *format_bytes_apart(value, limit))
            )
    if policy.timeout is not None and elapsed_s is not None and elapsed_s > policy.timeout:
        return KillDecision(
            "timeout",
            policy.timeout,
            elapsed_s,
            f"killed at timeout: trial ran {elapsed_s:.1f} s > {policy.timeout:g} s",
        )
    return None


def first_recycle(
    policy: Policy, rss_after_bytes: Sequence[int], peak_bytes: Sequence[int]
) -> tuple[int, RecycleDecision] | None:
    """Replay one worker's recorded per-trial series through :func:`decide_recycle`.

    Returns ``(trials_done, decision)`` at the first trial after which the worker would have been
    recycled, or None if it never would. A tool for tests and for tuning a policy offline.
    """
    if len(rss_after_bytes) != len(peak_bytes):
        raise ConfigError("rss_after_bytes and peak_bytes must have one reading per trial each")
    for n in range(1, len(rss_after_bytes) + 1):
        history = WorkerHistory(n, tuple(rss_after_bytes[:n]), tuple(peak_bytes[:n]))
        decision = decide_recycle(policy, history)
        if decision is not None:
            return n, decision
    return None


# --------------------------------------------------------------------------------------------------
# why a worker ended


@dataclass(frozen=True, slots=True)
class EndCause:
    """Why a worker process ended while (or without) running a trial.

    ``attempt_status`` is what the trial's attempt records (None when no trial was running),
    ``worker_reason`` the store's word for the worker's end, ``detail`` the numbers behind it and
    ``message`` one line for people.
    """

    attempt_status: str | None
    worker_reason: str
    detail: dict[str, Any]
    message: str


_KILL_REASON = {
    "killed_memory": "killed_memory",
    "killed_gpu_memory": "killed_gpu_memory",
    "killed_budget": "killed_budget",
    "timeout": "killed_timeout",
}


def classify_end(
    returncode: int | None,
    *,
    in_trial: bool,
    kill: KillDecision | None = None,
    oom_kills_before: int | None = None,
    oom_kills_after: int | None = None,
) -> EndCause:
    """Say why a worker ended, from its exit status and what the supervisor knows.

    Args:
        returncode: ``Popen.returncode`` (negative: killed by that signal).
        in_trial: whether a trial was running.
        kill: the supervisor's own kill of this worker, if it made one.
        oom_kills_before / oom_kills_after: the cgroup's ``oom_kill`` counter at the worker's start and
            now (None when unreadable); a rise means the OS OOM killer acted in this cgroup.
    """
    detail: dict[str, Any] = {"exitcode": returncode}
    status: str | None
    if kill is not None:
        reason = _KILL_REASON[kill.status]
        if kill.status == "timeout":
            detail.update(timeout_s=kill.limit, elapsed_s=round(kill.value, 3))
        elif kill.status == "killed_gpu_memory":
            detail.update(gpu_bytes=int(kill.value), limit_bytes=int(kill.limit))
        elif kill.status == "killed_budget":
            detail.update(sum_bytes=int(kill.value), budget_bytes=int(kill.limit))
        else:
            detail.update(rss_bytes=int(kill.value), limit_bytes=int(kill.limit))
        detail["signal"] = "SIGKILL"
        return EndCause(kill.status if in_trial else None, reason, detail, kill.message)
    oom_rose = (
        oom_kills_before is not None and oom_kills_after is not None and oom_kills_after > oom_kills_before
    )
    sigkill = returncode in (-9, 137)
    if sigkill:
        detail["signal"] = "SIGKILL"
        if oom_rose:
            detail["oom_kill_count"] = oom_kills_after
            message = "killed by the OS out-of-memory killer (SIGKILL; the cgroup's oom_kill count rose)"
            return EndCause("os_oom" if in_trial else None, "os_oom", detail, message)
        evidence = (
            "no oom_kill in the cgroup" if oom_kills_after is not None else "cgroup oom_kill unreadable"
        )
        message = (
            f"killed by SIGKILL from outside trainguard: the OS OOM killer or another process ({evidence})"
        )
        detail["why"] = "SIGKILL from outside trainguard"
        status = "crashed" if in_trial else None
        return EndCause(status, "crashed", detail, message)
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        detail["signal"] = name
        words = {
            "SIGSEGV": "segmentation fault",
            "SIGABRT": "aborted",
            "SIGBUS": "bus error",
            "SIGFPE": "arithmetic fault",
        }
        extra = f" ({words[name]})" if name in words else ""
        return EndCause(
            "crashed" if in_trial else None, "crashed", detail, f"crashed: killed by {name}{extra}"
        )
    if in_trial:
        return EndCause(
            "crashed", "crashed", detail, f"the worker exited with code {returncode} in the middle of a trial"
        )
    if returncode == 0:
        return EndCause(None, "exited", detail, "the worker exited")
    return EndCause(None, "crashed", detail, f"the worker exited with code {returncode}")


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
    if len(history.rss_after_bytes) >= policy.min_trials_for_slope:
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
    budget_bytes: int, workers: Sequence[tuple[int, int, float | None]]
) -> BudgetKill | None:
    """Which worker to kill when one sample of every worker tree sums over ``budget_bytes``.

    ``workers`` are ``(worker_id, tree_bytes, trial_elapsed_s)``, the elapsed time None for a worker
    running no trial (idle, starting, a replacement started early). The choice: among the workers
    whose tree alone is at least the excess (ending one of them brings the sum back under the budget
    by itself), the one whose kill costs least: no trial first, else the trial that started last
    (the least work lost and run again); the larger tree on a tie. When no single tree covers the
    excess, the largest tree (the next sample ends another if the sum is still over). None: the sum
    is within the budget.
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
        "killed at the memory budget: the workers' trees summed {} > {}; ".format(
            *format_bytes_apart(total, budget_bytes)
        )
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
    if len(rss) < policy.min_trials_for_slope:
        return False
    slope = max(growth_per_trial(rss) or 0.0, 0.0)
    excess = max(0, peaks[-1] - rss[-1]) if peaks else 0
    n = history.trials_done
    for ahead in range(1, trials_ahead + 1):
        rss.append(int(rss[-1] + slope))
        peaks.append(int(rss[-1] + excess))
        ahead_history = WorkerHistory(n + ahead, tuple(rss), tuple(peaks), history.supervisor_rss_bytes)
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
    medians = {threads: _median(list(durations)) for threads, durations in measured.items()}
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
