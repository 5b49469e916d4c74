"""Memory in a guarded Optuna study (parent side): each trial's predicted peak, memory as a
sampler constraint, memory as an objective.

- :class:`TrialPeaks` is the parent's peak model. The Runner under a guarded study runs *slots*
  (``{"slot": i}``), whose params say nothing about memory, so the model of
  :mod:`trainguard.runner` (:class:`~trainguard.runner.PeakForecaster`) is fitted here, on the
  Optuna params of the study's finished trials. Optuna defines params while the objective runs,
  so a trial's prediction is the model *as it stood when the trial started* (fitted on the trials
  finished before), evaluated at the params the trial then suggested.
- :func:`memory_constraints` makes the ``constraints_func`` of Optuna's samplers. Optuna calls it
  in the parent after a trial ends COMPLETE or PRUNED (never for FAIL), and it reads only the
  trial's user attributes, which the guarded objective set before returning. Optuna 5 deprecates
  ``constraints_func`` for ``trial.set_constraint``, which its samplers read whatever sampler it
  is: given as ``optimize(..., constraints=...)``, the guarded objective sets the same values so.
- :func:`constraint_values` is the rule, pure: measured peak over the limit, as a fraction of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.outcomes import OOM_STATUSES
from trainguard.runner import PeakForecaster, PeakPrediction
from trainguard.units import format_bytes, parse_size

__all__ = [
    "MemoryConstraints",
    "memory_constraints",
    "constraint_values",
    "uses_memory_constraints",
    "TrialPeaks",
]

logger = logging.getLogger(__name__)

PREFIX = "trainguard_"
#: the smallest violation a trial that died of memory gets: its measured peak is only a floor of
#: where it was going, and it may have been ended under the constraint's limit (the OS's OOM
#: killer, a smaller ``Policy(memory_limit=...)``), yet it did not fit
KILLED_VIOLATION = 0.001
#: the names ``trial.set_constraint`` is given (RSS, then GPU)
CONSTRAINT_NAMES = ("trainguard_memory", "trainguard_gpu_memory")


def _limit(value: Any, name: str) -> int:
    example = "memory_constraints('4GB')" if name == "limit" else "memory_constraints('4GB', gpu_limit='8GB')"
    try:
        limit = parse_size(value, name=name)
    except ConfigError as err:
        problem = getattr(err, "problem", None)
        if problem is None:  # not a size at all (None, a list...): parse_size's words say what to give
            raise ConfigError(f"{err}, as in {example}", value=repr(value)) from err
        raise ConfigError(
            f"{name}={value!r} {problem}: give a size above 0, as in {example}", value=repr(value)
        ) from err
    if limit <= 0:
        raise ConfigError(
            f"{name}={value!r} is 0 bytes: give a size above 0, as in {example}", value=repr(value)
        )
    return limit


def constraint_values(
    user_attrs: Mapping[str, Any], limit_bytes: int, gpu_limit_bytes: int | None = None
) -> tuple[float, ...]:
    """One value per limit (RSS, then GPU when given), Optuna's way: <= 0 feasible, > 0 the
    fraction of the limit the trial's measured peak went over it. A trial that died of memory is
    infeasible (at least :data:`KILLED_VIOLATION`) whatever its last reading was; a trial with no
    measured peak (not run by trainguard) counts as feasible (0.0): nothing says it is over."""
    status = str(user_attrs.get(PREFIX + "status") or "")
    killed = status in OOM_STATUSES
    gpu_killed = status == "killed_gpu_memory"
    values = [_over(user_attrs.get(PREFIX + "peak_rss_bytes"), limit_bytes, killed and not gpu_killed)]
    if gpu_limit_bytes is not None:
        values.append(_over(user_attrs.get(PREFIX + "peak_gpu_bytes"), gpu_limit_bytes, gpu_killed))
    elif gpu_killed:
        values[0] = max(values[0], KILLED_VIOLATION)
    return tuple(values)


def _over(peak: Any, limit: int, killed: bool) -> float:
    over = (
        (float(peak) - limit) / limit
        if isinstance(peak, (int, float)) and not isinstance(peak, bool)
        else 0.0
    )
    return max(over, KILLED_VIOLATION) if killed else over


@dataclass(frozen=True, slots=True)
class MemoryConstraints:
    """Optuna's ``constraints_func`` over trainguard's measured peaks (see :func:`memory_constraints`)."""

    limit_bytes: int
    gpu_limit_bytes: int | None = None

    def __call__(self, trial: Any) -> tuple[float, ...]:
        return constraint_values(trial.user_attrs, self.limit_bytes, self.gpu_limit_bytes)

    def set_on(self, trial: Any, attrs: Mapping[str, Any]) -> None:
        """Set the values on a live ``optuna.Trial`` (Optuna >= 5's ``trial.set_constraint``),
        from the memory attributes ``attrs`` its trial gets."""
        values = constraint_values(attrs, self.limit_bytes, self.gpu_limit_bytes)
        for name, value in zip(CONSTRAINT_NAMES, values, strict=False):
            trial.set_constraint(name, value)

    def __repr__(self) -> str:
        gpu = (
            f", gpu_limit={format_bytes(self.gpu_limit_bytes)!r}" if self.gpu_limit_bytes is not None else ""
        )
        return f"memory_constraints({format_bytes(self.limit_bytes)!r}{gpu})"


def memory_constraints(
    limit: str | int | float, *, gpu_limit: str | int | float | None = None
) -> MemoryConstraints:
    """A ``constraints_func`` for Optuna's samplers that makes configs over a memory limit infeasible.

    ::

        limit = trainguard.optuna.memory_constraints("4GB")
        # Optuna >= 5: the guarded objective sets the values (trial.set_constraint), any sampler reads them
        trainguard.optuna.optimize(study, objective, n_trials=50, constraints=limit)
        # any Optuna (``constraints_func`` is deprecated in Optuna 5):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(constraints_func=limit))

    Each guarded trial's ``trainguard_peak_rss_bytes`` (and ``trainguard_peak_gpu_bytes``) gives one
    value: ``(peak - limit) / limit``, feasible at 0 or less. A trial whose measured peak is over the
    limit completes with its value but is infeasible: the sampler steers away from its region and
    ``study.best_trial`` never picks it. A trial that died of memory (killed at
    ``Policy(memory_limit=...)``, by the OS, a framework OOM) is infeasible too: with these
    constraints on the study's sampler the guarded objective ends it PRUNED instead of FAIL (Optuna
    asks constraints of COMPLETE and PRUNED trials only, and a killed trial has no value), after
    ``Policy(retries=...)`` if any; ``trainguard_status`` still says what killed it.

    Args:
        limit: the most tree RSS a feasible trial may reach: ``"4GB"``, ``"512MiB"`` or bytes.
        gpu_limit: the most GPU memory, as a second constraint (None: no GPU constraint).

    Returns:
        A callable ``constraints(frozen_trial) -> tuple[float, ...]`` (picklable), for a sampler's
        ``constraints_func`` or the ``constraints=`` of :func:`~trainguard.optuna.optimize` and
        :func:`~trainguard.optuna.isolated` (not both: a violation would count twice).

    Raises:
        ConfigError: a limit that is not a size above 0.
    """
    gpu = None if gpu_limit is None else _limit(gpu_limit, "gpu_limit")
    return MemoryConstraints(_limit(limit, "limit"), gpu)


def uses_memory_constraints(study: Any) -> bool:
    """Whether ``study``'s sampler (or a sampler it wraps) takes :func:`memory_constraints`."""
    sampler, seen = getattr(study, "sampler", None), 0
    while sampler is not None and seen < 5:
        if isinstance(getattr(sampler, "_constraints_func", None), MemoryConstraints):
            return True
        sampler, seen = (
            getattr(sampler, "_base_sampler", None) or getattr(sampler, "_sampler", None),
            seen + 1,
        )
    return False


class TrialPeaks:
    """The parent's peak model over one guarded objective's Optuna trials (module docstring).

    Thread-safe: with ``workers > 1`` Optuna calls the objective from several threads."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._forecaster: PeakForecaster | None = None

    def start(self, study: Any) -> Any:
        """The model a trial starting now is predicted with (None: no model)."""
        if not self.enabled:
            return None
        with self._lock:
            if self._forecaster is None:
                self._forecaster = PeakForecaster(_prior(study))
            return self._forecaster.model()

    @staticmethod
    def predict(model: Any, params: Mapping[str, Any]) -> PeakPrediction:
        if model is None:
            return PeakPrediction.unknown("no peak model (Policy(predict_peaks=False))")
        return model if isinstance(model, PeakPrediction) else model.predict(dict(params))

    def observe(
        self, params: Mapping[str, Any], status: str, peak: int | None, predicted: PeakPrediction
    ) -> None:
        """Feed the model a finished trial: an ``ok`` one's peak, a memory kill's (a floor)."""
        if self._forecaster is None:
            return
        with self._lock:
            if status == "ok":
                self._forecaster.observe(dict(params), peak)
            elif status in OOM_STATUSES:
                surprise = self._forecaster.observe_kill(dict(params), peak, predicted)
                if surprise is not None:
                    logger.info("%s", surprise)


def _prior(study: Any) -> list[tuple[Any, int]]:
    """The study's completed trials that a guarded objective measured before this one, newest first."""
    try:
        optuna = __import__("optuna")
        trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    except Exception:  # noqa: BLE001 - a study we cannot read gives no prior, not an error
        return []
    out = []
    for trial in reversed(trials):
        peak = trial.user_attrs.get(PREFIX + "peak_rss_bytes")
        if isinstance(peak, int) and peak > 0 and not trial.user_attrs.get(PREFIX + "status"):
            out.append((dict(trial.params), peak))
    return out
