"""The wire between the Slurm driver and its pilots: JSON messages of a fixed schema, never pickle.

The connection is ``multiprocessing.connection``'s (a mutual HMAC challenge with the run's token
before anything else), but only its ``send_bytes``/``recv_bytes`` framing is used: each message
is one UTF-8 JSON object checked here against its op's fields (the same checker as the local
worker's pipe, :mod:`trainguard.runner._protocol`), so a peer can send data and nothing it could
make run. Bytes (a worker's frames) travel as base64 text. The trial function never travels on
the wire: the pilot has it from its job's private pickle, and a ``fn`` message of kind
``"pickle"`` carries only the payload's SHA-256, which the pilot checks against its own copy.

driver -> pilot::

    {"op": "start", "worker_id": int, "spec": {WorkerSpec's fields}, "overrides": {str: str}, "index": int}
    {"op": "send", "worker_id": int, "msg": {a supervisor -> worker message}}
    {"op": "kill", "worker_id": int}
    {"op": "shutdown"}

pilot -> driver::

    {"op": "hello", "pilot": int, "job_id": str|None, "host": str, "python": str, "executable": str,
     "pid": int, "problem": str|None}
    {"op": "started", "worker_id": int, "info": dict} | {"op": "start_failed", "worker_id": int, "message": str}
    {"op": "events", "events": [["out", id, base64] | ["sample", id, rss, uss, gpu]
                                | ["kill", id, status, limit, value, message, split|None]
                                | ["pressure", id, rule, rss, message, {str: number|None}, delivered]
                                | ["exit", id, rc, before, after]]}

    a kill's ``split`` is the tree's memory by kind when the verdict read it: ``[anon, file, shmem,
    tmpfs, cgroup_shmem|None]`` bytes (it may be left off: a kill without one)
    {"op": "ending", "why": str, "terminating": bool}
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any

from trainguard.runner._protocol import ProtocolError, _need, json_object
from trainguard.runner.backends.base import WorkerSpec

__all__ = [
    "MAX_WIRE_BYTES",
    "ProtocolError",
    "decode",
    "encode",
    "fn_digest",
    "from_events",
    "receive",
    "spec_from_wire",
    "spec_to_wire",
    "to_events",
]

#: the largest message either side accepts (a worker's result frames ride in "events")
MAX_WIRE_BYTES = 1 << 30

_INT_OR_NONE = (int, type(None))
_NUMBER = (int, float)


def _fields(*optional: str, **types: Any) -> list[tuple[str, Any, bool]]:
    """An op's fields as :func:`decode` checks them: each name's type, and whether it may be left
    off or None (the names in ``optional``)."""
    return [(name, kind, name in optional) for name, kind in types.items()]


_SCHEMA: dict[str, list[tuple[str, Any, bool]]] = {
    "start": _fields(worker_id=int, spec=dict, overrides=dict, index=int),
    "send": _fields(worker_id=int, msg=dict),
    "kill": _fields(worker_id=int),
    "shutdown": [],
    "hello": _fields(
        "job_id", "problem", pilot=int, job_id=str, host=str, python=str, executable=str, pid=int, problem=str
    ),
    "started": _fields(worker_id=int, info=dict),
    "start_failed": _fields(worker_id=int, message=str),
    "events": _fields(events=list),
    "ending": _fields(why=str, terminating=bool),
}

#: each event's fields after its kind and worker id
_EVENTS: dict[str, tuple[Any, ...]] = {
    "out": (str,),
    "sample": (int, _INT_OR_NONE, _INT_OR_NONE),
    "kill": (str, _NUMBER, _NUMBER, str, (list, type(None))),
    "pressure": (str, int, str, dict, bool),
    "exit": (_INT_OR_NONE, _INT_OR_NONE, _INT_OR_NONE),
}
#: how many of an event's last fields may be left off
_OPTIONAL_TAIL = {"kill": 1}


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode("utf-8")


def decode(data: bytes, ops: frozenset[str]) -> dict[str, Any]:
    """One message checked: JSON, an object, one of ``ops``, its fields of the right types.

    Raises:
        ProtocolError: anything else (the text says what).
    """
    msg = json_object(data, say_why=False)
    op = msg.get("op")
    if not isinstance(op, str) or op not in ops:
        raise ProtocolError(f"a message with the unexpected op {op!r}")
    for key, types, optional in _SCHEMA[op]:
        _need(msg, key, types, optional=optional)
    if op == "events":
        msg["events"] = from_events(msg["events"])
    return msg


def receive(conn: Any, ops: frozenset[str], max_bytes: int = MAX_WIRE_BYTES) -> dict[str, Any]:
    """The next message on ``conn`` (a ``multiprocessing.connection`` connection), checked by
    :func:`decode` against ``ops``.

    Raises:
        ProtocolError: what came is not a message of the wire.
        EOFError, OSError: the peer is gone, or sent more than ``max_bytes``.
    """
    return decode(conn.recv_bytes(max_bytes), ops)


def to_events(events: list[tuple[Any, ...]]) -> list[list[Any]]:
    """A slot agent's events for the wire (a worker's bytes as base64)."""
    out: list[list[Any]] = []
    for event in events:
        if event[0] == "out":
            out.append(["out", event[1], base64.b64encode(event[2]).decode("ascii")])
        else:
            out.append(list(event))
    return out


def from_events(raw: list[Any]) -> list[tuple[Any, ...]]:
    """The wire's events checked and decoded (the inverse of :func:`to_events`)."""
    out: list[tuple[Any, ...]] = []
    for event in raw:
        if not isinstance(event, list) or len(event) < 2 or event[0] not in _EVENTS:
            raise ProtocolError(f"an event that is not one of {sorted(_EVENTS)}: {str(event)[:80]}")
        kind, worker_id, rest = event[0], event[1], event[2:]
        types = _EVENTS[kind]
        shortest = len(types) - _OPTIONAL_TAIL.get(kind, 0)
        if type(worker_id) is not int or not shortest <= len(rest) <= len(types):
            raise ProtocolError(f"a {kind!r} event of the wrong shape: {str(event)[:80]}")
        for value, want in zip(rest, types[: len(rest)], strict=True):
            if (isinstance(value, bool) and want is not bool) or not isinstance(value, want):
                raise ProtocolError(f"a {kind!r} event with {value!r}")
        _check_numbers(kind, rest)
        if kind == "out":
            try:
                rest = [base64.b64decode(rest[0], validate=True)]
            except ValueError:
                raise ProtocolError("an 'out' event whose bytes are not base64") from None
        out.append((kind, worker_id, *rest))
    return out


def _check_numbers(kind: str, rest: list[Any]) -> None:
    """A kill's memory split (five byte counts, the last may be None) and a pressure's values (text
    keys, numbers or None) hold nothing else."""
    if kind == "kill" and len(rest) == 5 and rest[4] is not None:
        split = rest[4]
        if len(split) != 5 or not all(type(v) is int or (v is None and i == 4) for i, v in enumerate(split)):
            raise ProtocolError(f"a 'kill' event whose memory split is {str(split)[:80]}")
    if kind == "pressure" and not all(
        isinstance(k, str) and (v is None or (type(v) in (int, float))) for k, v in rest[3].items()
    ):
        raise ProtocolError(f"a 'pressure' event whose values are {str(rest[3])[:80]}")


_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(WorkerSpec)}


def spec_to_wire(spec: WorkerSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in _SPEC_FIELDS}


def spec_from_wire(raw: dict[str, Any]) -> WorkerSpec:
    """A :class:`WorkerSpec` from the wire, its fields checked."""
    if set(raw) != set(_SPEC_FIELDS):
        raise ProtocolError(f"a worker spec with the fields {sorted(raw)}")
    for key in ("worker_id", "slot", "max_message_bytes"):
        _need({"op": "start", **raw}, key, int)
    for key in ("env", "bootstrap", "detail"):
        _need({"op": "start", **raw}, key, dict)
    for key in ("fn_kind", "tree_tracking"):
        _need({"op": "start", **raw}, key, str)
    for key in ("memory_limit_bytes", "capture_dir"):
        _need({"op": "start", **raw}, key, int if key == "memory_limit_bytes" else str, optional=True)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in raw["env"].items()):
        raise ProtocolError("a worker spec whose env is not text")
    return WorkerSpec(**raw)


def fn_digest(payload: bytes | str) -> str:
    """The SHA-256 (hex) that names a pickled trial function on the wire."""
    data = payload if isinstance(payload, bytes) else payload.encode("utf-8")
    return hashlib.sha256(data).hexdigest()
