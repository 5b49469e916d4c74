"""A stored trainguard run written to MLflow: one parent run, one child run per trial.

Each child holds the trial's params (as MLflow params), the numbers of its result and its memory
columns (:func:`trainguard.integrations.columns.memory_columns`: ``peak_rss_bytes``,
``growth_bytes``, ``duration_s``, ``attempts``) as metrics, and ``status``, ``worker_id`` and a
failure's cause as tags; MLflow's own status is FINISHED or FAILED. The parent carries the run's
name, function and trial count. Nothing is read from MLflow, only written: exporting twice writes
two parents.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from trainguard.exceptions import ConfigError, missing
from trainguard.integrations.columns import result_numbers, run_columns

__all__ = ["export", "tracking_uri"]

_PARAM_CHARS = 6000  # MLflow's limit on a param value


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError as err:
        raise missing("mlflow", "trainguard.mlflow", extra="mlflow") from err
    return mlflow


def tracking_uri(to: str | os.PathLike[str] | None) -> str:
    """``to`` as a tracking URI: a folder becomes a ``file:`` store (MLflow's file store, which
    MLflow 3 only opens with ``MLFLOW_ALLOW_FILE_STORE=true``: set here for this process, when
    unset); a URI (``sqlite:///mlflow.db``, ``http://host:5000``) stays; None is MLflow's default."""
    if to is None:
        return os.environ.get("MLFLOW_TRACKING_URI", "") or tracking_uri("mlruns")
    text = os.fspath(to)
    if "://" in text or text.startswith("file:"):
        if text.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return text
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return Path(text).resolve().as_uri()


def _open_run(store: Any, run: str) -> tuple[Any, list[Any]]:
    from trainguard.store import Store

    owned = not isinstance(store, Store)
    if owned and not Path(os.fspath(store)).is_file():
        raise ConfigError(
            f"store {os.fspath(store)!r} does not exist: give the trainguard store the run is in"
        )
    db = Store(store, readonly=True) if owned else store
    try:
        info = db.get_run(run)
        if info is None:
            names = [r.name for r in db.list_runs()]
            hint = f"known runs: {', '.join(names[-5:])}" if names else "the store has no runs"
            raise ConfigError(f"no run named {run!r} in the store ({hint})")
        return info, db.trials(info.run_id)
    finally:
        if owned:
            db.close()


def _params(params: Any) -> list[Any]:
    from mlflow.entities import Param

    from trainguard.integrations.columns import _text

    return [Param(str(k), _text(v)[:_PARAM_CHARS]) for k, v in sorted((params or {}).items())]


def export(
    run: str,
    store: Any = "trainguard.db",
    *,
    to: str | os.PathLike[str] | None = None,
    experiment: str = "trainguard",
) -> str:
    """Write run ``run`` of ``store`` to MLflow; return the parent run's id.

    Args:
        run: the run's name in the store.
        store: the store's path or an open ``trainguard.store.Store``.
        to: an MLflow tracking URI or a folder for a local file store (default ``MLFLOW_TRACKING_URI``,
            else ``./mlruns``).
        experiment: the MLflow experiment (made when missing).

    Raises:
        MissingDependencyError: mlflow is not installed.
        ConfigError: no such store or run.
    """
    mlflow = _mlflow()
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    info, trials = _open_run(store, run)
    client = MlflowClient(tracking_uri=tracking_uri(to))
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    parent = client.create_run(
        experiment_id,
        run_name=info.name,
        tags={
            "trainguard.run": info.name,
            "trainguard.fn": info.fn_ref,
            "trainguard.trials": str(len(trials)),
        },
    )
    now = int(time.time() * 1000)
    for trial, columns in zip(sorted(trials, key=lambda t: t.index), run_columns(trials), strict=True):
        child = client.create_run(
            experiment_id,
            run_name=f"{info.name}/{trial.index}",
            tags={mlflow.utils.mlflow_tags.MLFLOW_PARENT_RUN_ID: parent.info.run_id},
        )
        numbers = result_numbers(trial.value)
        numbers.update(
            {
                k: float(columns[k])
                for k in ("peak_rss_bytes", "growth_bytes", "duration_s", "attempts")
                if columns.get(k) is not None
            }
        )
        tags = {"trainguard.index": str(trial.index), "status": str(columns["status"])}
        for key in ("worker_id", "failure", "message"):
            if columns.get(key) is not None:
                tags[key if key != "worker_id" else "worker"] = str(columns[key])
        client.log_batch(
            child.info.run_id,
            metrics=[Metric(k, v, now, 0) for k, v in numbers.items()],
            params=_params(trial.params),
            tags=[RunTag(k, v) for k, v in tags.items()],
        )
        client.set_terminated(child.info.run_id, "FINISHED" if trial.status == "ok" else "FAILED")
    client.set_terminated(parent.info.run_id, "FINISHED")
    return str(parent.info.run_id)
