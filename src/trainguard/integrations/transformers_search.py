"""Hyperparameter searches of Hugging Face ``Trainer`` s whose every trial trains in a guarded worker.

How it runs: the search is an Optuna study in the caller, as ``Trainer.hyperparameter_search``
with ``backend="optuna"`` is (the study's sampler, its directions, any storage), driven by
:func:`trainguard.optuna.optimize`. Each trial's objective, :class:`TrainerObjective`, runs in a
supervised trainguard worker (a :class:`trainguard.Runner` worker, reused, recycled by the policy,
killed at its limits): there ``hp_space(trial)`` draws the trial's params through a proxy of the
caller's trial, ``trainer_factory(params)`` builds the ``Trainer``, which trains and evaluates,
and the objective (``compute_objective(metrics)``, by default the ``Trainer``'s own: the
evaluation loss) goes back. The caller never imports torch or transformers.

Why not ``trainer.hyperparameter_search(backend=...)``: its backends are a closed enum
(``optuna``, ``ray``, ``wandb``) and it trains the one ``Trainer`` it was called on, in the
caller's process; there is no place for a backend that trains elsewhere.

The same trial function serves ``Runner.map`` (:class:`TrainerTrial`): there
``Policy(on_oom=Shrink("per_device_train_batch_size", accumulate="gradient_accumulation_steps"))``
reruns a training that ran out of memory in a fresh worker with half the batch and twice the
accumulation (what ``TrainingArguments(auto_find_batch_size=True)`` does in the same process).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.exceptions import ConfigError, missing

__all__ = ["BestRun", "TrainerObjective", "TrainerTrial", "hyperparameter_search", "require_transformers"]

#: the guard options that make the trials' policy; the others go to the Runner
_POLICY_KEYS = ("policy", "memory_limit", "timeout")


def require_transformers(purpose: str) -> None:
    """Check that transformers is installed, without importing it.

    Args:
        purpose: what needs it, for the message.

    Raises:
        MissingDependencyError: it is not installed.
    """
    if "transformers" in sys.modules:
        found = sys.modules["transformers"] is not None
    else:
        try:
            found = importlib.util.find_spec("transformers") is not None
        except (ImportError, ValueError):
            found = False
    if not found:
        raise missing("transformers", purpose, extra="transformers")


@dataclasses.dataclass(frozen=True, slots=True)
class BestRun:
    """The best trial, named as ``transformers.trainer_utils.BestRun`` names it.

    Attributes:
        run_id: the trial's number, as a string.
        objective: its objective value.
        hyperparameters: the params ``hp_space`` drew for it.
        run_summary: the Optuna study (every trial, with trainguard's ``trainguard_*`` attributes:
            peak memory, status).
    """

    run_id: str
    objective: float | list[float]
    hyperparameters: dict[str, Any]
    run_summary: Any = None


def _sendable(fn: Any, name: str, example: str) -> Any:
    """A callable as it is, or a ``"module:function"`` / ``"file.py:function"`` reference checked
    here (nothing imported) and loaded in the worker: the caller then never imports its module."""
    if isinstance(fn, str):
        from trainguard.runner import prepare_fn

        return prepare_fn(fn)
    if not callable(fn):
        raise ConfigError(
            f"{name} must be a callable {example} or a 'file.py:function' reference, not {type(fn).__name__}"
        )
    return fn


def _resolved(fn: Any) -> Callable[..., Any]:
    from trainguard.runner import FnSpec, load_fn

    return load_fn(fn.kind, fn.payload) if isinstance(fn, FnSpec) else fn


def _default_objective(metrics: dict[str, float]) -> float:
    from transformers.trainer_utils import default_compute_objective

    return float(default_compute_objective(dict(metrics)))


def _plain(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


class TrainerTrial:
    """A trial function for ``Runner.map``: builds a ``Trainer`` from the params, trains it,
    evaluates it, and returns ``{"objective": float, "metrics": {...}, "train_loss": float}``.

    Args:
        trainer_factory: ``trainer_factory(params) -> transformers.Trainer`` (called in the worker),
            or its ``"file.py:function"`` / ``"module:function"`` reference.
        compute_objective: ``compute_objective(metrics) -> float``; default the ``Trainer``'s own
            (the evaluation loss, or the sum of the other metrics when there are some).
        evaluate: evaluate after training (default True); False returns the training loss as
            the objective.

    Raises:
        ConfigError: ``trainer_factory`` or ``compute_objective`` is not callable.
    """

    def __init__(
        self,
        trainer_factory: Callable[[dict[str, Any]], Any],
        compute_objective: Callable[[dict[str, float]], float] | None = None,
        *,
        evaluate: bool = True,
    ) -> None:
        self.trainer_factory = _sendable(trainer_factory, "trainer_factory", "params -> transformers.Trainer")
        self.compute_objective = (
            None
            if compute_objective is None
            else _sendable(compute_objective, "compute_objective", "metrics -> float")
        )
        self.evaluate = evaluate

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        trainer = _resolved(self.trainer_factory)(dict(params))
        if not hasattr(trainer, "train"):
            raise TypeError(
                f"trainer_factory returned a {type(trainer).__name__}, not a transformers.Trainer"
            )
        output = trainer.train()
        if self.evaluate:
            metrics = _plain(trainer.evaluate())
            compute = (
                _default_objective if self.compute_objective is None else _resolved(self.compute_objective)
            )
            objective = compute(metrics)
        else:
            metrics = {}
            objective = float(output.training_loss)
        del trainer  # the model and its optimizer go before the next trial in this worker
        return {"objective": float(objective), "metrics": metrics, "train_loss": float(output.training_loss)}


class TrainerObjective:
    """The Optuna objective each guarded trial runs: ``hp_space(trial)`` draws the params, a
    :class:`TrainerTrial` trains and evaluates; the metrics are kept as the trial's
    ``metrics`` user attribute.

    Args:
        trainer_factory: as for :class:`TrainerTrial`.
        hp_space: ``hp_space(trial) -> dict`` of params, with Optuna's ``trial.suggest_*``.
        compute_objective: as for :class:`TrainerTrial`.

    Raises:
        ConfigError: an argument is not callable.
    """

    def __init__(
        self,
        trainer_factory: Callable[[dict[str, Any]], Any],
        hp_space: Callable[[Any], dict[str, Any]],
        compute_objective: Callable[[dict[str, float]], float] | None = None,
    ) -> None:
        self.hp_space = _sendable(hp_space, "hp_space", "trial -> dict of params")
        self.trial = TrainerTrial(trainer_factory, compute_objective)

    def __call__(self, trial: Any) -> float:
        params = _resolved(self.hp_space)(trial)
        if not isinstance(params, Mapping):
            raise TypeError(f"hp_space must return a dict of params, not {type(params).__name__}")
        result = self.trial(dict(params))
        trial.set_user_attr("metrics", result["metrics"])
        return float(result["objective"])


def _guard_options(guard: Mapping[str, Any] | None) -> dict[str, Any]:
    """``guard`` as :func:`trainguard.optuna.optimize` keywords (its policy made from
    ``memory_limit``/``timeout`` as the KerasTuner guard does)."""
    if guard is None:
        guard = {}
    if not isinstance(guard, Mapping):
        raise ConfigError(f"guard must be a dict of options such as {{'memory_limit': '4GB'}}, not {guard!r}")
    options = {k: v for k, v in guard.items() if k not in _POLICY_KEYS}
    if any(k in guard for k in _POLICY_KEYS):
        from trainguard.integrations._tasks import make_policy

        explicit = guard.get("policy")
        policy = make_policy(explicit, guard.get("memory_limit"), guard.get("timeout"))
        if explicit is None:  # the study's process counts, as optimize's default policy has it
            policy = dataclasses.replace(policy, budget_counts_supervisor=True)
        options["policy"] = policy
    options.setdefault("store", None)
    return options


def hyperparameter_search(
    trainer_factory: Callable[[dict[str, Any]], Any],
    hp_space: Callable[[Any], dict[str, Any]],
    n_trials: int = 20,
    direction: str | list[str] = "minimize",
    compute_objective: Callable[[dict[str, float]], float] | None = None,
    *,
    guard: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BestRun | list[BestRun]:
    """``Trainer.hyperparameter_search(backend="optuna")`` with each trial's ``Trainer`` built,
    trained and evaluated in a guarded trainguard worker; the caller imports neither torch nor
    transformers and stays flat however many trials run.

    Args:
        trainer_factory: ``trainer_factory(params) -> transformers.Trainer``, called in the worker
            with the trial's params (build ``TrainingArguments(**base, **params)``; seed the model
            as ``Trainer(model_init=...)`` does, so that a trial's result depends on its params only).
        hp_space: ``hp_space(trial) -> dict``, as the ``Trainer``'s (``trial.suggest_*`` of Optuna).
        n_trials: trials to run.
        direction: ``"minimize"`` or ``"maximize"`` (or a list, for several objectives).
        compute_objective: ``metrics -> float``; default the ``Trainer``'s (the evaluation loss).
        guard: where the trials run: ``workers``, ``memory_limit``, ``timeout`` (a trial's), or a
            ``policy``, ``store``, ``name``, and any :class:`trainguard.Runner` keyword.
        **kwargs: as the ``Trainer``'s: ``timeout`` (of the whole search), ``catch`` and
            ``callbacks`` go to ``study.optimize``; the rest (``sampler``, ``pruner``,
            ``study_name``, ``storage``...) to ``optuna.create_study``.

    Returns:
        The best trial as a :class:`BestRun` (its ``run_summary`` is the study); with several
        directions, the list of the best trials, as the ``Trainer``'s search returns.

    Raises:
        MissingDependencyError: transformers or optuna is not installed.
        ConfigError: a bad argument, or a factory that cannot be sent to a worker (before any trial).
    """
    require_transformers("trainguard.transformers.hyperparameter_search")
    objective = TrainerObjective(trainer_factory, hp_space, compute_objective)
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ConfigError(f"n_trials={n_trials!r} must be a whole number >= 1, such as 20")
    for one in direction if isinstance(direction, list) else [direction]:
        if one not in ("minimize", "maximize"):
            raise ConfigError(f"direction={one!r} must be 'minimize' or 'maximize'")
    options = _guard_options(guard)
    run_options = {k: kwargs.pop(k) for k in ("timeout", "catch", "callbacks") if k in kwargs}
    from trainguard.integrations.optuna import _optuna, optimize

    optuna = _optuna()
    several = isinstance(direction, list)
    study = optuna.create_study(
        direction=None if several else direction, directions=direction if several else None, **kwargs
    )
    optimize(study, objective, n_trials, **run_options, **options)
    if several:
        return [BestRun(str(t.number), t.values, dict(t.params), study) for t in study.best_trials]
    best = study.best_trial
    return BestRun(str(best.number), float(best.value), dict(best.params), study)
