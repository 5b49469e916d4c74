"""``trainguard export --to mlflow`` on a tracking URI that leads nowhere: one line, at once
(issue 34, item 10). Before, a refused port printed MLflow's traceback after its seven retries
(about 4 minutes), and an unknown scheme a traceback."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from _needs import needs

needs("mlflow")

from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("mlflow-bad") / "runs.db"
    with Store(db) as s:
        run = s.begin_run("sweep", "x.py:f", [{"lr": 0.1}], {})
        s.finish_trial(
            run.run_id, 0, status="ok", value={"loss": 0.5}, error=None, attempts=1,
            peak_rss_bytes=1 << 20, worker_id=0, duration_s=0.1,
        )  # fmt: skip
        s.finish_run(run.run_id, "completed")
    return db


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed on return: nothing listens there


def _export(store: Path, uri: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "trainguard", "export", "sweep", "--store", str(store), "--to", "mlflow",
         "--tracking-uri", uri],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("http://127.0.0.1:{port}", "cannot reach the MLflow tracking server at http://127.0.0.1:{port} (connection refused)"),
        ("bogus://x", "has the scheme 'bogus', which MLflow does not open"),
        ("http://", "names no host"),
        ("http://no-such-host.invalid:5000", "the host no-such-host.invalid does not resolve"),
        ("http://127.0.0.1:port", "has a port that is not a number"),
    ],
)  # fmt: skip
def test_a_bad_tracking_uri_is_one_line(store: Path, uri: str, words: str) -> None:
    port = _refused_port()
    # no clock here: a refused port took 4 min 9 s before (seven retries), about 1.5 s now; the
    # retries themselves are bounded, which the test below checks
    done = _export(store, uri.format(port=port))
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert words.format(port=port) in lines[0] and "--tracking-uri" in lines[0]


class _Failing(http.server.BaseHTTPRequestHandler):
    """A tracking server that answers every request with 503."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(503)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def failing_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_fails_is_one_line_after_bounded_retries(store, failing_server, monkeypatch):
    import trainguard.mlflow
    from trainguard.integrations import mlflow_export

    for key in (
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    ):
        monkeypatch.delenv(key, raising=False)
    seen: list[dict[str, str | None]] = []
    real_write = mlflow_export._write

    def watching(*args, **kwargs):  # noqa: ANN002, ANN003 - _write's own
        seen.append(
            {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
        )
        return real_write(*args, **kwargs)

    monkeypatch.setattr(mlflow_export, "_write", watching)
    with pytest.raises(ConfigError) as info:
        trainguard.mlflow.export("sweep", store=str(store), to=failing_server)
    message = str(info.value)
    assert "\n" not in message and f"MLflow at {failing_server} refused the export" in message
    # the export ran with bounded retries and timeout, and left the environment as it found it
    assert seen == [{"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}]
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def test_the_users_own_retry_setting_wins(monkeypatch):
    from trainguard.integrations.mlflow_export import http_limits

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")
    with http_limits():
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "5"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "5"
