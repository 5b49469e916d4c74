"""Messages over the bridge: JSON frames, and for a call's arguments and value, cloudpickle frames.

JSON is used for everything the two sides say to each other (the Optuna proxy, output lines, the
kind of a reply). A guarded call's arguments (parent to worker, as the Runner sends a function by
value) and its returned value or exception (worker to parent) are cloudpickle bytes: they are the
user's own objects, made by the user's own function, on a socket in a private 0700 folder that
only a process holding the random authkey can reach. Nothing of it is stored: the Runner's
protocol and the store stay JSON.
"""

from __future__ import annotations

import json
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["send_json", "recv_json", "bridge_family"]


def bridge_family(platform: str | None = None) -> str:
    """The bridge's ``multiprocessing.connection`` family: a unix socket in a private folder on
    POSIX, a named pipe on Windows (whose ``multiprocessing`` has no AF_UNIX)."""
    import sys

    return "AF_PIPE" if (sys.platform if platform is None else platform) == "win32" else "AF_UNIX"


def _plain(obj: Any) -> Any:
    # numpy scalars (Optuna's should_prune() can return numpy.bool_, samplers numpy floats)
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "ndim", 1) == 0:
        return item()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def send_json(conn: Connection, message: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(message, default=_plain).encode())


def recv_json(conn: Connection) -> dict[str, Any]:
    return json.loads(conn.recv_bytes())
