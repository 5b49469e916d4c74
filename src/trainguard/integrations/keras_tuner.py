"""KerasTuner searches whose every trial builds and fits its model in a guarded trainguard worker.

How it runs (see docs/explanation/architecture.md, "Integrations"): the tuner's own loop stays in
the caller (``tuner.search``: the oracle asks for hyperparameters, writes its directory, ends
each trial, resumes); only ``run_trial`` moves. The guarded ``run_trial`` sends a copy of the
tuner (its oracle replaced by the objective, all ``run_trial`` reads of it), the trial and the fit
arguments to a :class:`~trainguard.integrations._tasks.TaskPool` worker, which runs the tuner
class's own ``run_trial`` there: the model is built and fitted in the worker, and the best epoch's
weights are written to the trial's folder as usual, so ``get_best_models`` loads them. The
histories come back as plain dicts and are made ``keras.callbacks.History`` objects again, for
the oracle to read as ``tuner.search`` would.

A trial whose worker is killed (memory limit, timeout, crash) raises KerasTuner's
``FailedTrialError`` with the cause and the peak: the oracle records the trial FAILED with that
message, and retries it only as ``max_retries_per_trial`` says (never forever).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from trainguard._optional import import_optional
from trainguard.exceptions import ConfigError, TrainguardError
from trainguard.integrations._tasks import TaskPool, make_policy

__all__ = ["search", "GuardedTunerMixin", "TrialGuard"]

_GUARD_ATTR = "_trainguard_guard"


def _keras_tuner() -> Any:
    return import_optional("keras_tuner", "keras-tuner", "trainguard.keras_tuner", "keras-tuner")


class _ObjectiveOnly:
    """What the worker's tuner copy has for an oracle: its objective (``run_trial`` reads no more)."""

    def __init__(self, objective: Any) -> None:
        self.objective = objective


class _RunTrial:
    """The task a worker runs: the tuner class's own ``run_trial`` (after the mixin in its MRO)."""

    def __init__(
        self, tuner: Any, after: type | None, trial: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ):
        self.tuner = tuner
        self.after = after
        self.trial = trial
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> Any:
        after = self.after
        if after is None:
            results = type(self.tuner).run_trial(self.tuner, self.trial, *self.args, **self.kwargs)
        else:
            results = super(after, self.tuner).run_trial(self.trial, *self.args, **self.kwargs)  # type: ignore[arg-type]
        return _plain_results(results)


def _plain_results(results: Any) -> Any:
    """Histories as ``{"history": dict}`` (a History holds its model, which must not travel)."""
    if isinstance(results, list):
        return [_plain_results(r) for r in results]
    history = getattr(results, "history", None)
    if isinstance(history, dict) and hasattr(results, "set_model"):
        return {"__keras_history__": {k: [float(v) for v in vs] for k, vs in history.items()}}
    return results


def _rebuilt_results(results: Any) -> Any:
    if isinstance(results, list):
        return [_rebuilt_results(r) for r in results]
    if isinstance(results, dict) and set(results) == {"__keras_history__"}:
        import keras

        history = keras.callbacks.History()
        history.history = results["__keras_history__"]
        return history
    return results


def _worker_copy(tuner: Any) -> Any:
    """A shallow copy of ``tuner`` that can travel: no oracle (only its objective), no guard."""
    clone = copy.copy(tuner)
    state = clone.__dict__
    state.pop(_GUARD_ATTR, None)
    state.pop("run_trial", None)  # the instance attribute search() sets
    state["oracle"] = _ObjectiveOnly(tuner.oracle.objective)
    return clone


class TrialGuard:
    """Runs one tuner's trials in a task pool; made by :func:`search` and the mixin.

    Args:
        workers: worker processes (KerasTuner's loop asks for one trial at a time: 1 is the default).
        policy, memory_limit, timeout: a :class:`trainguard.Policy`, or its two hard limits.
        store, name: a trainguard store (and run name) to keep each trial's memory history.
        **runner_options: any other :class:`trainguard.Runner` keyword (``keras_backend``...).
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        policy: Any = None,
        memory_limit: Any = None,
        timeout: Any = None,
        store: Any = None,
        name: str | None = None,
        **runner_options: Any,
    ) -> None:
        import dataclasses

        from trainguard.runner import Runner

        policy = make_policy(policy, memory_limit, timeout)
        self._runner = Runner(
            workers=workers,
            policy=dataclasses.replace(policy, retries=0, on_error="continue"),
            store=store,
            **runner_options,
        )
        self._pool = TaskPool(self._runner, name=name)
        self._lock = threading.Lock()

    def run_trial(
        self, tuner: Any, after: type | None, trial: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run one trial's build-and-fit in the guarded worker.

        Args:
            tuner: the tuner the trial belongs to.
            after: the class in the tuner's MRO after the mixin, whose ``run_trial`` the worker calls.
            trial: the KerasTuner trial.
            args: ``search``'s positional arguments.
            kwargs: ``search``'s keyword arguments.

        Returns:
            What the tuner's own ``run_trial`` returns.

        Raises:
            keras_tuner.errors.FatalError: the trial cannot be sent to a worker (the search stops).
            keras_tuner.errors.FailedTrialError: the worker was killed or crashed (the cause and peak in
                its message; the oracle retries it as ``max_retries_per_trial`` says).
        """
        kt = _keras_tuner()
        what = f"trial {trial.trial_id} of {type(tuner).__name__}"
        task = _RunTrial(_worker_copy(tuner), after, trial, args, kwargs)
        try:
            future = self._pool.submit_task(task, what)
        except ConfigError as err:
            raise kt.errors.FatalError(str(err)) from None
        try:
            results = future.result()
        except TrainguardError as err:
            if future.failure is None:
                raise
            peak = future.failure.peak_rss_bytes
            from trainguard.units import format_bytes

            detail = f" (peak {format_bytes(peak)})" if peak else ""
            raise kt.errors.FailedTrialError(f"{err}{detail}") from None
        return _rebuilt_results(results)

    def close(self) -> None:
        """End the workers (idempotent)."""
        self._pool.close()


class GuardedTunerMixin:
    """Put before a KerasTuner tuner class to run each trial's build-and-fit in a guarded worker::

        class GuardedSearch(trainguard.keras_tuner.GuardedTunerMixin, keras_tuner.RandomSearch):
            trainguard_options = {"memory_limit": "4GB"}

    ``trainguard_options`` (a class attribute or an instance attribute set before ``search``)
    holds :class:`TrialGuard`'s keywords. The workers end when the search ends.
    """

    trainguard_options: dict[str, Any] = {}

    def run_trial(self, trial: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the trial's build-and-fit in a guarded worker instead of this process.

        Args:
            trial: the KerasTuner trial.
            *args: ``search``'s positional arguments (the data), passed to ``fit``.
            **kwargs: ``search``'s keyword arguments, passed to ``fit``.

        Returns:
            What the tuner's own ``run_trial`` returns (the histories the oracle reads).
        """
        guard = self.__dict__.get(_GUARD_ATTR)
        if guard is None:
            guard = TrialGuard(**dict(self.trainguard_options))
            self.__dict__[_GUARD_ATTR] = guard
        return guard.run_trial(self, GuardedTunerMixin, trial, args, kwargs)

    def on_search_end(self) -> None:
        """Let the tuner finish the search as usual, then end the warm worker."""
        guard = self.__dict__.pop(_GUARD_ATTR, None)
        try:
            super().on_search_end()  # type: ignore[misc]
        finally:
            if guard is not None:
                guard.close()


def search(tuner: Any, *fit_args: Any, guard: dict[str, Any] | None = None, **fit_kwargs: Any) -> Any:
    """``tuner.search(*fit_args, **fit_kwargs)`` with each trial's build-and-fit in a guarded worker.

    Args:
        tuner: a KerasTuner tuner (``RandomSearch``, ``BayesianOptimization``, ``Hyperband``,
            ``GridSearch`` or a subclass of ``keras_tuner.Tuner``).
        *fit_args, **fit_kwargs: what ``tuner.search`` takes (``x``, ``y``, ``epochs``,
            ``validation_data``, ``callbacks``...).
        guard: :class:`TrialGuard`'s keywords (``memory_limit``, ``timeout``, ``policy``,
            ``workers``, ``store``, ``name``, Runner options), e.g. ``{"memory_limit": "4GB"}``.

    Returns:
        The tuner (``get_best_hyperparameters``, ``get_best_models``, ``results_summary`` work
        as after ``tuner.search``).

    Raises:
        MissingDependencyError: keras-tuner is not installed.
        ConfigError: ``tuner`` is not a KerasTuner tuner, a bad guard option, or the hypermodel
            cannot be sent to a worker (one line naming it, before any trial runs).
    """
    kt = _keras_tuner()
    if not isinstance(tuner, kt.engine.base_tuner.BaseTuner):
        raise ConfigError(
            f"tuner must be a KerasTuner tuner (keras_tuner.RandomSearch(...)), not {type(tuner).__name__}"
        )
    if guard is not None and not isinstance(guard, dict):
        raise ConfigError(f"guard must be a dict of options such as {{'memory_limit': '4GB'}}, not {guard!r}")
    _check_sendable(tuner)
    trial_guard = TrialGuard(**(guard or {}))

    def run_trial(trial: Any, *args: Any, **kwargs: Any) -> Any:
        return trial_guard.run_trial(tuner, None, trial, args, kwargs)

    tuner.run_trial = run_trial
    try:
        tuner.search(*fit_args, **fit_kwargs)
    finally:
        tuner.__dict__.pop("run_trial", None)
        trial_guard.close()
    return tuner


def _check_sendable(tuner: Any) -> None:
    """The hypermodel (and the rest of what a trial sends) pickles, or one line naming it."""
    from trainguard.integrations._tasks import dumps_task

    hypermodel = getattr(tuner, "hypermodel", None)
    build = getattr(hypermodel, "build", None)
    inner = getattr(hypermodel, "_build", None) or build
    name = getattr(inner, "__qualname__", type(hypermodel).__name__)
    dumps_task(hypermodel, f"the hypermodel {name}")
    dumps_task(_worker_copy(tuner), f"the tuner {type(tuner).__name__}")
