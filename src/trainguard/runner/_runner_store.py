"""What a :class:`~trainguard.runner.Runner` does with its store: open it, ask it which runs a
peak model reads and what a function's stored trials peaked at, write a run's report, close it.

The Runner's store-facing half, apart from its sessions (``_runner.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from trainguard.exceptions import ConfigError
from trainguard.runner._fnref import prepare
from trainguard.runner._params import check_params
from trainguard.runner.policy import Policy
from trainguard.runner.policy._peaks import PeakPrediction
from trainguard.runner.policy._prediction_scope import PredictionScope, prediction_scope
from trainguard.runner.session import Session
from trainguard.runner.session._predict import PeakForecaster

if TYPE_CHECKING:
    from trainguard.store import Store

__all__ = ["RunnerStore"]

_R = TypeVar("_R", bound="RunnerStore")


class RunnerStore:
    """The store side of a Runner (a mixin: the Runner sets these attributes in its constructor)."""

    policy: Policy
    _store_arg: str | os.PathLike[str] | Store | None
    _store: Store | None
    _owns_store: bool
    _session: Session | None
    _forecasts: dict[str, PeakForecaster]
    _last_run: str | None

    def _init_store(self, store: str | os.PathLike[str] | Store | None) -> None:
        """Nothing open yet: the store is opened at the first run (or question) that needs it."""
        self._store_arg = store
        self._store = None
        self._owns_store = False
        self._session = None
        self._forecasts = {}  # the last session's peak model, by function
        self._last_run = None

    def _open_store(self) -> Store | None:
        if self._store is not None or self._store_arg is None:
            return self._store
        from trainguard.store import Store

        if isinstance(self._store_arg, Store):
            self._store = self._store_arg
        elif isinstance(self._store_arg, (str, os.PathLike)):
            self._store = Store(self._store_arg)
            self._owns_store = True
        else:
            raise ConfigError(
                f"store must be a file path such as 'runs.db', a trainguard.store.Store, or None, not {self._store_arg!r}"
            )
        return self._store

    def _prediction_scope(self, name: str, predict_from: Any) -> PredictionScope:
        """Which runs' history ``name``'s peak model reads (a ConfigError before anything starts
        for a ``predict_from`` that names no run of the store). A store file that does not exist
        yet is not created to be asked: it has no runs."""
        names: list[str] = []
        store_words: str | None = None
        if self._store_arg is not None:
            store_words = str(getattr(self._store_arg, "path", self._store_arg))
            asks = isinstance(predict_from, str) and self.policy.predict_peaks
            is_path = self._store is None and isinstance(self._store_arg, (str, os.PathLike))
            if asks and (not is_path or os.path.exists(store_words)):
                store = self._open_store()
                assert store is not None
                names = store.run_names()
        return prediction_scope(
            name, predict_from, predict_peaks=self.policy.predict_peaks, store=store_words, stored_runs=names
        )

    def predict_peak(
        self, fn: Callable[[dict[str, Any]], Any] | str, params: Mapping[str, Any]
    ) -> PeakPrediction:
        """The peak memory ``fn(params)`` is predicted to reach, before it runs: the peak model
        fitted on the finished trials of this runner's runs of ``fn`` and, with a store, of every
        stored run of the same function's code.

        Returns:
            A :class:`~trainguard.runner.PeakPrediction`: ``peak_bytes`` with its 95 % interval
            (``low_bytes``, ``high_bytes``) and the model in words (``reason``), or, while the trials
            do not tell (too few, or params that do not explain the peaks), ``known`` False and why.

        Raises:
            ConfigError: a bad fn or params.

        Args:
            fn: the trial function, as :meth:`map` takes it.
            params: the trial's params.
        """
        spec = prepare(fn)
        checked = check_params([params])[0]
        prior: list[tuple[Any, int]] = []
        if self._store_arg is not None:
            store = self._open_store()
            assert store is not None
            prior = store.peak_observations(spec.ref, spec.version)
        forecaster = self._forecasts.get(spec.ref)
        if forecaster is None or forecaster.observations < len(prior):
            forecaster = PeakForecaster(prior)
        return forecaster.predict(checked)

    def report(self, path: str | os.PathLike[str] | None = None, *, run: str | None = None) -> str:
        """Write the self-contained HTML report of this runner's last run (or of ``run``).

        Args:
            path: the file to write; default ``<run name>.html`` in the current folder.
            run: another run of this runner's store, by name.

        Returns:
            The path written (see :func:`trainguard.report`).

        Raises:
            ConfigError: no store (``store=None``), no run yet, or a path that cannot be written.
        """
        from trainguard.report import report

        if self._store_arg is None:
            raise ConfigError(
                "this Runner keeps no store (store=None): nothing to report; pass store='runs.db'"
            )
        name = run if run is not None else self._last_run
        if name is None:
            raise ConfigError(
                "this Runner has not run anything yet: call map() or imap() first, or pass run=NAME"
            )
        store = self._open_store()
        assert store is not None  # a Runner with a store argument opens one
        return report(name, store=store, path=path)

    @property
    def store(self) -> Store | None:
        """The open store (None before the first run or with ``store=None``)."""
        return self._store

    def close(self) -> None:
        """Stop any running session (its workers are killed) and close the store if this runner opened it."""
        session, self._session = self._session, None
        if session is not None:
            session.close()
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None
            self._owns_store = False

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
