"""The warm-call engine, worker side: a slot connects to the bridge and runs the job it is given.

:class:`BaseSlot` is the Runner trial function (``{"slot": i}``) that every guarded pool runs; it
is cloudpickled to the workers and carries the user's callable as
:func:`trainguard.runner.prepare_fn` made it, loaded as soon as the worker unpickles the slot (so a
callable that cannot load fails before any job). Subclasses say what one job is:
:class:`CallSlot` (one call of an ``@isolated`` function, or one notebook cell) here, the Optuna
trial in :mod:`trainguard.integrations._optuna_worker`.

This module runs inside workers and imports nothing heavy.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from multiprocessing.connection import Client, Connection
from typing import Any

from trainguard.guarded._wire import bridge_family, recv_json, send_json

__all__ = ["BaseSlot", "CallSlot", "BridgeStream", "unwrap"]


def unwrap(fn: Any) -> Any:
    """The plain function behind an ``@isolated`` wrapper (a module that decorates its function
    at import gives the worker the wrapper; inside the worker the function runs as it is)."""
    return getattr(fn, "__trainguard_wrapped__", fn)


class BaseSlot:
    """One Runner trial that runs at most one job handed out by the parent's bridge."""

    #: the ``op`` of the message that hands this slot a job
    job_op = "job"

    def __init__(self, address: str, authkey: bytes, fn_kind: str, fn_payload: Any, ref: str) -> None:
        self.address = address
        self.authkey = authkey
        self.fn_kind = fn_kind
        self.fn_payload = fn_payload
        self.ref = ref
        self._fn: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("address", "authkey", "fn_kind", "fn_payload", "ref")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        from trainguard.runner import load_fn as load

        try:
            self._fn = unwrap(load(self.fn_kind, self.fn_payload))
        except Exception as err:
            raise RuntimeError(
                f"{self.ref} cannot be loaded in the worker: {type(err).__name__}: {err}"
            ) from err

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        conn = Client(self.address, family=bridge_family(), authkey=self.authkey)
        try:
            send_json(conn, {"op": "hello", "slot": int(params["slot"]), "pid": os.getpid()})
            message = recv_json(conn)
            if message.get("op") != self.job_op:
                return {"kind": "stop"}
            return self.run(conn, message)
        finally:
            conn.close()

    def run(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        """Run the job ``message`` opened; the return value is the Runner trial's (JSON) value."""
        raise NotImplementedError


class BridgeStream:
    """``sys.stdout``/``sys.stderr`` of a guarded call: each write travels to the caller as it
    happens (JSON ``out`` frames), so output shows in the notebook cell while the cell runs."""

    def __init__(self, conn: Connection, name: str, lock: threading.Lock, original: Any) -> None:
        self._conn = conn
        self._name = name
        self._lock = lock
        self._original = original
        self._buffer = ""

    def write(self, text: str) -> int:
        # whole lines travel (one frame per print, not one per piece print writes)
        self._buffer += str(text)
        if "\n" in self._buffer:
            head, _, self._buffer = self._buffer.rpartition("\n")
            self._send(head + "\n")
        elif len(self._buffer) > 8192:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._buffer:
            text, self._buffer = self._buffer, ""
            self._send(text)

    def _send(self, text: str) -> None:
        try:
            with self._lock:
                send_json(self._conn, {"op": "out", "stream": self._name, "text": text})
        except OSError:
            if self._original is not None:
                self._original.write(text)

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"

    def fileno(self) -> int:
        if self._original is None:
            raise OSError("no file descriptor")
        return int(self._original.fileno())


class CallSlot(BaseSlot):
    """A slot whose job is one call: cloudpickled ``(args, kwargs)`` in, the value or the
    exception out (cloudpickled, over the bridge); stdout and stderr stream to the caller."""

    job_op = "call"

    def run(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        import cloudpickle

        args, kwargs = cloudpickle.loads(conn.recv_bytes())
        lock = threading.Lock()
        saved = sys.stdout, sys.stderr
        sys.stdout = BridgeStream(conn, "stdout", lock, saved[0])
        sys.stderr = BridgeStream(conn, "stderr", lock, saved[1])
        try:
            try:
                value = self._fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the caller gets it, as the same type where it can
                return self._send_error(conn, lock, exc)
        finally:
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, BridgeStream):
                    stream.flush()
            sys.stdout, sys.stderr = saved
        try:
            payload = cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001
            with lock:
                send_json(
                    conn,
                    {
                        "op": "unsendable",
                        "message": f"the value ({describe(value)}) cannot be sent back: {exc}",
                    },
                )
            return {"kind": "unsendable"}
        with lock:
            send_json(conn, {"op": "return"})
            conn.send_bytes(payload)
        return {"kind": "returned", "bytes": len(payload)}

    def _send_error(self, conn: Connection, lock: threading.Lock, exc: Exception) -> dict[str, Any]:
        import cloudpickle

        text = "".join(traceback.format_exception(exc))[-20000:]
        try:
            payload: bytes | None = cloudpickle.dumps(exc)
            cloudpickle.loads(payload)  # an exception whose constructor cannot be called again
        except Exception:  # noqa: BLE001
            payload = None
        with lock:
            send_json(
                conn,
                {
                    "op": "raise",
                    "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                    "message": str(exc),
                    "traceback": text,
                    "pickled": payload is not None,
                },
            )
            if payload is not None:
                conn.send_bytes(payload)
        return {"kind": "raised", "type": type(exc).__qualname__}


def describe(value: Any) -> str:
    """``"a keras Functional"``, ``"an open file (TextIOWrapper)"``: what a value is, in words."""
    cls = type(value)
    module = (cls.__module__ or "").split(".")[0]
    name = cls.__qualname__
    if hasattr(value, "read") and hasattr(value, "closed") and module in ("_io", "io"):
        return f"an open file ({name})"
    if module in ("builtins", "_thread", "threading", "_io", "io", "__main__", ""):
        return f"a {name}"
    return f"a {module} {name}"
