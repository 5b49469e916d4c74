"""The supervisor-worker wire protocol: two OS pipes, length-prefixed pickled dicts.

``multiprocessing.connection.Connection`` over plain pipe file descriptors gives framing, ``poll``
and ``multiprocessing.connection.wait`` over many workers, and costs a few microseconds a message.
Messages are small dicts with an ``"op"`` key; trial results travel as a JSON string, already
checked in the worker, so the supervisor never unpickles user objects.

supervisor -> worker::

    {"op": "fn", "key": int, "kind": "module"|"file"|"pickle", "payload": str|bytes}
    {"op": "trial", "index": int, "attempt": int, "key": int, "params": dict,
     "cleanup": bool, "census": bool}
    {"op": "exit"}

worker -> supervisor::

    {"op": "ready", "pid": int, "preload_s": float, "frameworks": [str]}
    {"op": "fatal", "message": str}                      # bootstrap failed; the worker exits
    {"op": "fn_ok", "key": int} | {"op": "fn_error", "key": int, "message": str, "traceback": str}
    {"op": "started", "index": int, "attempt": int}
    {"op": "result", "index": int, "attempt": int, "status": str, "value_json": str|None,
     "error": dict|None, "duration_s": float, "rss_bytes": int, "hwm_bytes": int|None,
     "stats": dict}
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection

__all__ = ["PipePair", "open_pipes", "child_connections", "WORKER_CONFIG_ENV"]

#: The environment variable that carries the worker's JSON bootstrap configuration.
WORKER_CONFIG_ENV = "TRAINGUARD_WORKER_CONFIG"


class PipePair:
    """The supervisor's ends of a worker's two pipes, and the fds the child inherits."""

    __slots__ = ("to_worker", "from_worker", "child_read_fd", "child_write_fd")

    def __init__(self) -> None:
        down_r, down_w = os.pipe()  # supervisor -> worker
        up_r, up_w = os.pipe()  # worker -> supervisor
        for fd in (down_w, up_r):
            os.set_inheritable(fd, False)
        self.to_worker = Connection(down_w, readable=False, writable=True)
        self.from_worker = Connection(up_r, readable=True, writable=False)
        self.child_read_fd = down_r
        self.child_write_fd = up_w

    def close_child_ends(self) -> None:
        """Close the child's fds in the supervisor once the child holds them, so EOF means death.

        Idempotent: a closed fd is forgotten (-1). Closing a number twice would close whatever file
        another thread opened under that number since (another worker's pipe, a sampler's statm,
        a psutil read), which shows up as EBADF or wrong contents far from here.
        """
        fds = (self.child_read_fd, self.child_write_fd)
        self.child_read_fd = self.child_write_fd = -1
        for fd in fds:
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        self.close_child_ends()
        for conn in (self.to_worker, self.from_worker):
            try:
                conn.close()
            except OSError:
                pass


def open_pipes() -> PipePair:
    return PipePair()


def child_connections(read_fd: int, write_fd: int) -> tuple[Connection, Connection]:
    """Worker side: wrap the inherited fds."""
    return Connection(read_fd, readable=True, writable=False), Connection(
        write_fd, readable=False, writable=True
    )
