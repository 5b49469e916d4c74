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
- :func:`not_to_start` is the Runner's skip rule (:func:`trainguard.runner.policy.over_limit`) on a
  study's limits: a trial whose predicted interval lies wholly over ``Policy(memory_limit=...)`` or
  the study's :func:`memory_constraints` limit is not started. Its params are drawn in the parent
  before any work is sent (:meth:`TrialPeaks.draw`: the params the model uses, from the search
  space every measured trial used), so the objective is never entered for it.
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
from trainguard.runner.policy import not_started_message, over_limit
from trainguard.units import format_bytes, parse_size

__all__ = [
    "MemoryConstraints",
    "memory_constraints",
    "constraint_values",
    "uses_memory_constraints",
    "study_constraints",
    "TrialPeaks",
    "NotStarted",
    "not_to_start",
    "PREDICTED_OVER_LIMIT",
]

logger = logging.getLogger(__name__)

PREFIX = "trainguard_"
#: the smallest violation a trial that died of memory gets: its measured peak is only a floor of
#: where it was going, and it may have been ended under the constraint's limit (the OS's OOM
#: killer, a smaller ``Policy(memory_limit=...)``), yet it did not fit
KILLED_VIOLATION = 0.001
#: the names ``trial.set_constraint`` is given (RSS, then GPU)
CONSTRAINT_NAMES = ("trainguard_memory", "trainguard_gpu_memory")
#: the ``trainguard_status`` of a trial not started for its predicted peak (the Runner's word)
PREDICTED_OVER_LIMIT = "predicted_over_limit"


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
    infeasible (at least :data:`KILLED_VIOLATION`) whatever its last reading was, and so is one not
    started for its predicted peak (by its interval's low end); a trial with no
    measured peak (not run by trainguard) counts as feasible (0.0): nothing says it is over."""
    status = str(user_attrs.get(PREFIX + "status") or "")
    killed = status in OOM_STATUSES
    gpu_killed = status == "killed_gpu_memory"
    if status == PREDICTED_OVER_LIMIT:  # not run: the interval's low end is what it would at least reach
        rss = _over(user_attrs.get(PREFIX + "predicted_low_bytes"), limit_bytes, True)
        return (rss,) if gpu_limit_bytes is None else (rss, 0.0)
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
    ``Policy(retries=...)`` if any; ``trainguard_status`` still says what killed it. Once the peak
    model knows the region, a trial whose whole predicted interval is over the limit is not started
    at all: PRUNED and infeasible, ``trainguard_status="predicted_over_limit"``.

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


def study_constraints(study: Any) -> MemoryConstraints | None:
    """The :func:`memory_constraints` ``study``'s sampler (or a sampler it wraps) takes, if any."""
    sampler, seen = getattr(study, "sampler", None), 0
    while sampler is not None and seen < 5:
        found = getattr(sampler, "_constraints_func", None)
        if isinstance(found, MemoryConstraints):
            return found
        sampler, seen = (
            getattr(sampler, "_base_sampler", None) or getattr(sampler, "_sampler", None),
            seen + 1,
        )
    return None


def uses_memory_constraints(study: Any) -> bool:
    """Whether ``study``'s sampler (or a sampler it wraps) takes :func:`memory_constraints`."""
    return study_constraints(study) is not None


@dataclass(frozen=True, slots=True)
class NotStarted:
    """A trial the peak model says not to start: its prediction, the limit its interval's low end
    is over (as the user gave it), and the user attributes the trial ends with."""

    prediction: PeakPrediction
    limit_bytes: int
    limit: str
    message: str

    def attrs(self) -> dict[str, Any]:
        p = self.prediction
        return {
            PREFIX + "status": PREDICTED_OVER_LIMIT,
            PREFIX + "message": self.message[:1000],
            PREFIX + "predicted_peak_bytes": p.peak_bytes,
            PREFIX + "predicted_low_bytes": p.low_bytes,
            PREFIX + "predicted_high_bytes": p.high_bytes,
            PREFIX + "limit_bytes": self.limit_bytes,
        }


def not_to_start(prediction: PeakPrediction, limits: Mapping[str, int]) -> NotStarted | None:
    """Whether a trial predicted ``prediction`` must not start under ``limits`` (``{words: bytes}``):
    only when even its interval's low end is over one of them (the smallest it is over is named),
    so a trial that may fit always runs."""
    over = sorted((size, words) for words, size in limits.items() if over_limit(prediction, size))
    if not over:
        return None
    size, words = over[0]
    return NotStarted(prediction, size, words, not_started_message(prediction, words))


class TrialPeaks:
    """The parent's peak model over one guarded objective's Optuna trials (module docstring), and
    the search space its measured trials used (to draw a trial's params before it starts).

    Thread-safe: with ``workers > 1`` Optuna calls the objective from several threads."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._forecaster: PeakForecaster | None = None
        # each param's distribution in every measured trial (_VARIED where two trials differ)
        self._spaces: dict[str, Any] = {}

    def start(self, study: Any) -> Any:
        """The model a trial starting now is predicted with (None: no model)."""
        if not self.enabled:
            return None
        with self._lock:
            if self._forecaster is None:
                prior = _prior(study)
                for _params, _peak, distributions in prior:
                    self._learn(distributions)
                self._forecaster = PeakForecaster([(params, peak) for params, peak, _ in prior])
            return self._forecaster.model()

    @staticmethod
    def predict(model: Any, params: Mapping[str, Any]) -> PeakPrediction:
        if model is None:
            return PeakPrediction.unknown("no peak model (Policy(predict_peaks=False))")
        return model if isinstance(model, PeakPrediction) else model.predict(dict(params))

    def draw(self, trial: Any, model: Any) -> bool:
        """Suggest on the live ``trial``, in the parent, each param ``model`` uses that the trial
        has not yet, from the distribution every measured trial drew it from (the objective's own
        suggest then gets the same value: Optuna keeps a trial's first draw of a name). Returns
        whether the trial now has them all; False (nothing drawn) where the model uses no params
        or one's distribution varied between trials or is of a kind not known here."""
        features = tuple(getattr(model, "features", ()) or ())
        if not features or getattr(model, "flat", False):
            return False
        with self._lock:
            wanted = [(name, self._spaces.get(name)) for name in features if name not in trial.params]
        if any(space is None or space is _VARIED for _name, space in wanted):
            return False
        if not all(_drawable(space) for _name, space in wanted):
            return False
        for name, space in wanted:
            _suggest_from(trial, name, space)
        return True

    def observe(
        self,
        params: Mapping[str, Any],
        status: str,
        peak: int | None,
        predicted: PeakPrediction,
        distributions: Mapping[str, Any] | None = None,
    ) -> None:
        """Feed the model a finished trial: an ``ok`` one's peak, a memory kill's (a floor)."""
        if self._forecaster is None:
            return
        with self._lock:
            if status == "ok":
                self._forecaster.observe(dict(params), peak)
                self._learn(distributions or {})
            elif status in OOM_STATUSES:
                self._learn(distributions or {})
                surprise = self._forecaster.observe_kill(dict(params), peak, predicted)
                if surprise is not None:
                    logger.info("%s", surprise)

    def _learn(self, distributions: Mapping[str, Any]) -> None:
        for name, space in distributions.items():
            seen = self._spaces.setdefault(name, space)
            if seen is not _VARIED and seen != space:
                self._spaces[name] = _VARIED


_VARIED = object()


def _drawable(space: Any) -> bool:
    optuna = __import__("optuna")
    kinds = (
        optuna.distributions.FloatDistribution,
        optuna.distributions.IntDistribution,
        optuna.distributions.CategoricalDistribution,
    )
    return isinstance(space, kinds)


def _suggest_from(trial: Any, name: str, space: Any) -> Any:
    """``trial.suggest_*`` of ``name`` with the same arguments that gave ``space``."""
    optuna = __import__("optuna")
    if isinstance(space, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, list(space.choices))
    suggest = (
        trial.suggest_int if isinstance(space, optuna.distributions.IntDistribution) else trial.suggest_float
    )
    return suggest(name, space.low, space.high, step=space.step, log=space.log)


def _prior(study: Any) -> list[tuple[Any, int, Mapping[str, Any]]]:
    """The study's completed trials that a guarded objective measured before this one, newest
    first: ``(params, peak, distributions)``."""
    try:
        optuna = __import__("optuna")
        trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    except Exception:  # noqa: BLE001 - a study we cannot read gives no prior, not an error
        return []
    out: list[tuple[Any, int, Mapping[str, Any]]] = []
    for trial in reversed(trials):
        peak = trial.user_attrs.get(PREFIX + "peak_rss_bytes")
        if isinstance(peak, int) and peak > 0 and not trial.user_attrs.get(PREFIX + "status"):
            out.append((dict(trial.params), peak, dict(trial.distributions)))
    return out
