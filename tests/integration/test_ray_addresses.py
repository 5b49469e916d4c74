"""Ray addresses that are not a Ray head are refused within the connect timeout, in one line
(issue 23, item 14). No cluster is needed: what listens there is a plain socket or HTTP server.
How long a refusal takes is measured by bench/cli_response.py, not asserted here."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

pytest.importorskip("ray")

from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner.backends.ray import RayClusterBackend  # noqa: E402


def test_a_port_outside_the_tcp_range_is_refused_before_any_work():
    with pytest.raises(ConfigError, match=r"the port 99999 is not a TCP port \(1-65535\)"):
        RayClusterBackend(address="127.0.0.1:99999")
    with pytest.raises(ConfigError, match="the port 0 is not a TCP port"):
        RayClusterBackend(address="ray://head:0")


def _refused_within(address: str, timeout_s: float) -> str:
    """The one-line refusal; that it comes within ``timeout_s`` is bench/cli_response.py's to measure
    (a check that never gave up would hang here until pytest's timeout)."""
    backend = RayClusterBackend(address=address, connect_timeout=timeout_s)
    with pytest.raises(ConfigError) as info:
        backend._tcp_check()
        backend._answers_as_a_head()
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_server_that_accepts_and_never_answers_is_refused_in_time():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        message = _refused_within(f"127.0.0.1:{server.getsockname()[1]}", 2.0)
        assert "accepted the connection but did not answer" in message
    finally:
        server.close()


def test_an_http_server_is_not_taken_for_a_ray_head():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        message = _refused_within(f"127.0.0.1:{httpd.server_address[1]}", 2.0)
        assert "no Ray cluster at" in message
    finally:
        httpd.shutdown()
        httpd.server_close()
