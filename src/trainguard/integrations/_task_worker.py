"""Worker side of the task pool: a Runner trial that runs one task the parent hands it.

A *task* is any callable with no arguments (a joblib batch, a KerasTuner trial's build-and-fit).
The slot connects to the parent's bridge (see :class:`trainguard.integrations._tasks.TaskPool`, on :class:`trainguard.guarded.CallPool`),
receives the task as cloudpickle bytes, runs it, and sends back ``("ok", value)`` or
``("raised", exception)`` as cloudpickle bytes; the Runner trial's own value is a small JSON
summary. The task and what it returns are Python objects, as with joblib's loky workers: they
travel over an authenticated private socket between this process and its own parent and are
never stored (the store keeps only the JSON summary).

Imports nothing heavy: the task itself imports what it needs when it is unpickled.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import time
from multiprocessing.connection import Client
from typing import Any

from trainguard.guarded import bridge_family, recv_json, send_json

__all__ = ["TaskSlot", "load_task", "current_slot"]

#: the slot (one Runner trial) whose task this worker is running; None between tasks
_SLOT: list[int | None] = [None]


def current_slot() -> int | None:
    """The slot this worker runs a task in: one guarded trial, shared by the tasks of one batch.

    Returns:
        The slot's number, unique in its pool; None outside a task.
    """
    return _SLOT[0]


def load_task(payload: bytes) -> Any:
    """The task unpickled; when unpickling it imported modules (scikit-learn, SciPy: the first
    task in a worker), what those imports made is moved into the collector's permanent generation,
    as the worker does for what it imported before its first trial: the ``gc.collect()`` after
    every trial then scans only what tasks made (about 30 ms a trial with scikit-learn imported
    and not frozen, the most of a millisecond fit's cost). The task itself is not frozen: it is
    dropped, the garbage collected, then unpickled again (its modules are loaded by then)."""
    known = len(sys.modules)
    task = pickle.loads(payload)
    if len(sys.modules) == known:
        return task
    del task
    gc.collect()
    gc.freeze()
    return pickle.loads(payload)


def _dumps(obj: Any) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(obj)


def _reply(outcome: str, value: Any) -> bytes:
    """``(outcome, value)`` as bytes; a value that cannot be pickled becomes an error naming it."""
    try:
        return _dumps((outcome, value))
    except Exception as err:  # noqa: BLE001 - any pickling failure is the task's result problem
        what = (
            f"the task's result ({type(value).__name__})" if outcome == "ok" else f"its exception {value!r}"
        )
        problem = RuntimeError(
            f"{what} cannot be sent back from the trainguard worker: {type(err).__name__}: {err}"
        )
        return _dumps(("raised", problem))


def _run(payload: bytes) -> tuple[str, bytes]:
    """Run the pickled task: ``("ok" or "raised", the reply's bytes)``. What the task imported
    while it ran (a module scikit-learn loads on its first fit) is frozen as :func:`load_task`
    freezes what its unpickling imported, once the task and its value are dropped."""
    try:
        task = load_task(payload)
        del payload
        known = len(sys.modules)
        value = task()
        reply, outcome = _reply("ok", value), "ok"
        del task, value
    except Exception as exc:  # noqa: BLE001 - the caller gets the task's own exception
        return "raised", _reply("raised", exc)
    if len(sys.modules) != known:
        gc.collect()
        gc.freeze()
    return outcome, reply


class TaskSlot:
    """The Runner's trial function for a task pool: one call runs at most one task."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self.address = address
        self.authkey = authkey

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        slot = int(params["slot"])
        conn = Client(self.address, family=bridge_family(), authkey=self.authkey)
        _SLOT[0] = slot
        try:
            send_json(conn, {"op": "hello", "slot": slot, "pid": os.getpid()})
            message = recv_json(conn)
            if message.get("op") != "task":
                return {"kind": "stop"}
            start = time.perf_counter()
            outcome, reply = _run(conn.recv_bytes())
            conn.send_bytes(reply)
            return {
                "kind": "task",
                "outcome": outcome,
                "reply_bytes": len(reply),
                "task_s": round(time.perf_counter() - start, 6),
            }
        finally:
            _SLOT[0] = None
            conn.close()
