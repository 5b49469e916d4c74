"""The Slurm driver's door: the socket pilots connect back to, the token challenge both ways and
the pilot's hello, after which the pilot's link is attached (a mixin of
:class:`~trainguard.runner.backends.slurm.SlurmPilotBackend`).

A peer without the run's token is closed before a byte of its is parsed; one that stalls in its
handshake is cut off; a flood of connections is closed at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import ConfigError
from trainguard.runner.backends.slurm_wire import receive

if TYPE_CHECKING:
    from trainguard.runner.backends.slurm import _PilotLink

__all__ = ["PilotDoor", "MAX_HANDSHAKES", "bind_listener"]

logger = logging.getLogger("trainguard.runner.backends.slurm")

#: how long a connecting pilot has to pass the token challenge and say hello
_HANDSHAKE_S = 30.0
#: connections in their handshake at once (more are closed at once)
MAX_HANDSHAKES = 16


class PilotDoor:
    """Accepting pilots' connections (a mixin: the Slurm backend sets these attributes)."""

    _closing: bool
    _listener: Any
    _handshakes: threading.BoundedSemaphore
    _token: bytes
    _cond: threading.Condition
    _links: list[_PilotLink]
    _problem: BaseException | None
    _address: tuple[str, int] | None

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _accept(self) -> None:
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._closing:
                    return
                continue
            if self._closing:
                sock.close()
                return
            if not self._handshakes.acquire(blocking=False):
                sock.close()  # a flood of connections: the pilots retry nothing, they come once
                continue
            threading.Thread(
                target=self._handshake, args=(sock,), name="trainguard-slurm-handshake", daemon=True
            ).start()

    def _handshake(self, sock: socket.socket) -> None:
        """The token challenge both ways, then the pilot's hello (JSON): a peer without the token
        is closed before a byte of its is parsed; one that stalls is cut off after a while."""
        from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

        conn = Connection(sock.detach())
        timer = threading.Timer(_HANDSHAKE_S, _shut, args=(conn,))
        timer.daemon = True
        timer.start()
        try:
            deliver_challenge(conn, self._token)
            answer_challenge(conn, self._token)
            hello = receive(conn, frozenset({"hello"}), 1 << 16)
        except Exception as err:  # noqa: BLE001 - a wrong token, a bad hello, a peer gone
            logger.info("refused a connection to the Slurm driver: %s", err)
            conn.close()
            return
        finally:
            timer.cancel()
            self._handshakes.release()
        self._attach(conn, hello)

    def _attach(self, conn: Any, hello: dict[str, Any]) -> None:
        index = hello["pilot"]
        with self._cond:
            link = self._links[index] if 0 <= index < len(self._links) else None
        if link is None or link.conn is not None or str(link.job_id) != str(hello.get("job_id")):
            conn.close()
            return
        if hello.get("problem"):
            self._problem = ConfigError(
                f"the trial function cannot be loaded in Slurm pilot job {link.job_id} on node "
                f"{hello.get('host')} (Python {hello.get('python')} at {hello.get('executable')}): "
                f"{hello['problem']}; install it on the compute nodes (the same Python and packages)"
            )
        link.attach(conn, hello)
        self._changed()

    def _wake_accept(self) -> None:
        """A connection that fails the handshake: the accept thread wakes, sees closing, returns."""
        if self._listener is None:
            return
        if self._address is None:
            return
        with contextlib.suppress(OSError), socket.create_connection(self._address, 2.0):
            pass


def bind_listener(ip: str) -> socket.socket:
    """A listening TCP socket on ``ip`` alone (never every interface), any free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, 0))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def _shut(conn: Any) -> None:
    """Shut a connection's socket both ways: a read blocked on it returns."""
    with contextlib.suppress(OSError, ValueError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
