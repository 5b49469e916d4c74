"""A stored trainguard run written to MLflow: one parent run, one child run per trial.

Each child holds the trial's params (as MLflow params), the numbers of its result and its memory
columns (:func:`trainguard.integrations.columns.memory_columns`: ``peak_rss_bytes``,
``growth_bytes``, ``duration_s``, ``attempts``) as metrics, and ``status``, ``worker_id`` and a
failure's cause as tags; MLflow's own status is FINISHED or FAILED. The parent carries the run's
name, function and trial count. Nothing is read from MLflow, only written: exporting twice writes
two parents.

A tracking URI is checked before anything is written: an unknown scheme, an ``http(s)`` URI with no
host, or a server that does not answer a TCP connection within :data:`CONNECT_TIMEOUT_S` is one
line (:class:`~trainguard.exceptions.ConfigError`), not MLflow's traceback after its seven retries
(over four minutes on a refused port). While exporting, MLflow's HTTP client retries
:data:`HTTP_MAX_RETRIES` times with a :data:`HTTP_TIMEOUT_S` timeout (the user's own
``MLFLOW_HTTP_REQUEST_*`` settings win), and an error MLflow raises is one line naming the URI.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainguard._optional import import_optional
from trainguard.exceptions import ConfigError
from trainguard.integrations.columns import result_numbers, run_columns

__all__ = ["check_tracking_uri", "export", "http_limits", "probe_server", "tracking_uri"]

_PARAM_CHARS = 6000  # MLflow's limit on a param value

#: how long the probe of an ``http(s)`` tracking server waits for a TCP connection
CONNECT_TIMEOUT_S = 5.0
#: MLflow's HTTP retries and per-request timeout while exporting (its defaults: 7 retries, 120 s)
HTTP_MAX_RETRIES = 1
HTTP_TIMEOUT_S = 10
#: the tracking URI schemes MLflow opens (a folder path is made a ``file:`` URI)
SCHEMES = (
    "file",
    "http",
    "https",
    "sqlite",
    "postgresql",
    "mysql",
    "mssql",
    "databricks",
    "databricks-uc",
    "uc",
)
_FIX = "pass --tracking-uri a folder, sqlite:///mlflow.db or http://host:5000"


def _mlflow() -> Any:
    return import_optional("mlflow", "mlflow", "trainguard.mlflow", "mlflow")


def tracking_uri(to: str | os.PathLike[str] | None) -> str:
    """``to`` as a tracking URI: a folder becomes a ``file:`` store (MLflow's file store, which
    MLflow 3 only opens with ``MLFLOW_ALLOW_FILE_STORE=true``: set here for this process, when
    unset); a URI (``sqlite:///mlflow.db``, ``http://host:5000``) stays; None is MLflow's default.

    Args:
        to: a folder, a URI, or None.

    Returns:
        The tracking URI.
    """
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
        ConfigError: no such store or run; a tracking URI MLflow cannot open or a server that does
            not answer (checked before anything is written); an error MLflow raised, in one line.

    Returns:
        The MLflow id of the parent run.
    """
    if importlib.util.find_spec("mlflow") is None:
        _mlflow()  # raises, naming the extra to install
    # the URI, the run and the server are checked before MLflow (a heavy import) is loaded
    uri = tracking_uri(to)
    check_tracking_uri(uri)
    info, trials = _open_run(store, run)
    probe_server(uri)
    mlflow = _mlflow()
    from mlflow.exceptions import MlflowException

    try:
        with http_limits():
            return _write(mlflow, uri, experiment, info, trials)
    except MlflowException as err:
        raise ConfigError(f"MLflow at {uri} refused the export: {_first_line(err)}: {_FIX}") from err


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "message", "") or err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def check_tracking_uri(uri: str) -> None:
    """Refuse a tracking URI MLflow cannot open: an unknown scheme, or ``http(s)`` without a host.

    Raises:
        ConfigError: with the URI and what to pass instead.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(
            f"tracking URI {uri!r} has the scheme {scheme!r}, which MLflow does not open: {_FIX}"
        )
    if scheme in ("http", "https") and not parts.hostname:
        raise ConfigError(f"tracking URI {uri!r} names no host: {_FIX}")


def probe_server(uri: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """For an ``http(s)`` URI, connect to its host and port once (``timeout_s``); other URIs pass.

    Raises:
        ConfigError: the host does not resolve, refuses the connection or does not answer in time.
    """
    parts = urlsplit(uri)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        raise ConfigError(f"tracking URI {uri!r} has a port that is not a number: {_FIX}") from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return
    except socket.gaierror:
        why = f"the host {parts.hostname} does not resolve"
    except TimeoutError:
        why = f"nothing answered on port {port} within {timeout_s:g} s"
    except OSError as err:
        why = (err.strerror or str(err)).lower()
    raise ConfigError(
        f"cannot reach the MLflow tracking server at {uri} ({why}): start it (mlflow server --port {port}) "
        f"or {_FIX}"
    )


@contextlib.contextmanager
def http_limits() -> Iterator[None]:
    """MLflow's HTTP retries and timeout bounded (:data:`HTTP_MAX_RETRIES`, :data:`HTTP_TIMEOUT_S`)
    while the block runs, unless the user set them; the environment is restored after."""
    wanted = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(HTTP_MAX_RETRIES),
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(HTTP_TIMEOUT_S),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    }
    added = [key for key in wanted if key not in os.environ]
    os.environ.update({key: wanted[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _write(mlflow: Any, uri: str, experiment: str, info: Any, trials: list[Any]) -> str:
    """The parent run and a child per trial, written through MLflow's client; the parent's id."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
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
        client.log_batch(child.info.run_id, **_child_rows(trial, columns, now, Metric, RunTag))
        client.set_terminated(child.info.run_id, "FINISHED" if trial.status == "ok" else "FAILED")
    client.set_terminated(parent.info.run_id, "FINISHED")
    return str(parent.info.run_id)


def _child_rows(trial: Any, columns: dict[str, Any], now: int, metric: Any, tag: Any) -> dict[str, Any]:
    """One trial's metrics, params and tags, as ``log_batch`` takes them."""
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
    return {
        "metrics": [metric(k, v, now, 0) for k, v in numbers.items()],
        "params": _params(trial.params),
        "tags": [tag(k, v) for k, v in tags.items()],
    }
