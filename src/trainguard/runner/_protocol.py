"""The supervisor-worker wire protocol: two OS pipes.

supervisor -> worker: ``multiprocessing.connection.Connection`` messages (pickled dicts). That
direction carries the trial function (by reference, or cloudpickled for a function defined in
``__main__``), which the worker must run anyway.

worker -> supervisor: **data only**. Each message is a 4-byte big-endian length and that many bytes
of a JSON object, parsed by :class:`MessageReader` against a fixed schema (:func:`parse_message`);
nothing a worker sends is ever unpickled, so bytes a trial writes onto the channel cannot run code
in the supervisor. The reader is non-blocking and keeps partial frames in its buffer, so a trial
that writes half a message cannot stall the supervisor; a frame over the size cap, bytes that are
not JSON, or a message outside the schema raise :class:`ProtocolError`, and the supervisor fails
that worker with the cause and goes on.

supervisor -> worker::

    {"op": "fn", "key": int, "kind": "module"|"file"|"pickle", "payload": str|bytes}
    {"op": "trial", "index": int, "attempt": int, "key": int, "params": dict,
     "cleanup": bool, "census": bool, "mixed_precision": bool}
    {"op": "exit"}
    {"op": "stage_reply", "go_on": bool}                 # the answer to a "stage" message
    {"op": "trim"}                                       # malloc_trim(0) between trials; answers "trimmed"

worker -> supervisor::

    {"op": "ready", "pid": int, "preload_s": float, "frameworks": [str], "tree": {...},
     "device": {...}|None}                               # Device settings as the frameworks report them
    {"op": "fatal", "message": str}                      # bootstrap failed; the worker exits
    {"op": "fn_ok", "key": int} | {"op": "fn_error", "key": int, "message": str, "traceback": str}
    {"op": "stage", "index": int, "attempt": int, "stage": int, "rss_bytes": int, "pressure": bool}
                                    # a staged trial committed checkpoint "stage"; waits for stage_reply
    {"op": "trimmed", "trimmed": bool, "rss_before_bytes": int, "rss_bytes": int}
                                    # the answer to "trim": whether malloc_trim(0) was called, RSS around it
    {"op": "result", "index": int, "attempt": int, "status": str, "value_json": str|None,
     "error": dict|None, "duration_s": float, "rss_bytes": int, "hwm_bytes": int|None,
     "stats": dict}
"""

from __future__ import annotations

import json
import os
import socket
from multiprocessing.connection import Connection
from typing import Any

__all__ = [
    "PipePair",
    "MessageReader",
    "ProtocolError",
    "parse_message",
    "encode_message",
    "write_message",
    "child_connections",
    "WORKER_CONFIG_ENV",
    "WORKER_RESULT_STATUSES",
    "MESSAGE_OVERHEAD_BYTES",
]

#: The environment variable that carries the worker's JSON bootstrap configuration.
WORKER_CONFIG_ENV = "TRAINGUARD_WORKER_CONFIG"

#: What a worker may report as a trial's status (the supervisor adds deaths and kills).
WORKER_RESULT_STATUSES = frozenset(
    {"ok", "exception", "framework_oom", "not_serializable", "result_too_large", "staged"}
)

#: Room above the result cap for the rest of a result message (traceback, stats, census).
MESSAGE_OVERHEAD_BYTES = 4 << 20

_HEADER = 4
_CHUNK = 64 << 10


class ProtocolError(Exception):
    """A worker sent something that is not a message of the protocol (the text says what)."""


def encode_message(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode("utf-8")
    return len(data).to_bytes(_HEADER, "big") + data


def write_message(fd: int | socket.socket, msg: dict[str, Any]) -> None:
    """Worker side: write one whole message (blocking) on the pipe's fd, or the channel's socket."""
    if isinstance(fd, socket.socket):
        fd.sendall(encode_message(msg))
        return
    view = memoryview(encode_message(msg))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _need(msg: dict[str, Any], key: str, types: type | tuple[type, ...], *, optional: bool = False) -> None:
    if key not in msg:
        if optional:
            return
        raise ProtocolError(f"{msg.get('op')!r} message without {key!r}")
    value = msg[key]
    if value is None and optional:
        return
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ProtocolError(f"{msg.get('op')!r} message with {key}={value!r}")
    if not isinstance(value, types):
        raise ProtocolError(f"{msg.get('op')!r} message with {key} of type {type(value).__name__}")


_NUMBER = (int, float)

_SCHEMA: dict[str, list[tuple[str, Any, bool]]] = {
    "ready": [
        ("pid", int, False),
        ("preload_s", _NUMBER, False),
        ("frameworks", list, False),
        ("tree", dict, True),
        ("device", dict, True),
    ],
    "fatal": [("message", str, False)],
    "fn_ok": [("key", int, False)],
    "fn_error": [
        ("key", int, False),
        ("message", str, False),
        ("traceback", str, True),
        ("nested", str, True),
    ],
    "stage": [
        ("index", int, False),
        ("attempt", int, False),
        ("stage", int, False),
        ("remaining", int, True),
        ("rss_bytes", int, False),
        ("pressure", bool, True),
    ],
    "trimmed": [("trimmed", bool, False), ("rss_before_bytes", int, False), ("rss_bytes", int, False)],
    "result": [
        ("index", int, False),
        ("attempt", int, False),
        ("status", str, False),
        ("value_json", str, True),
        ("error", dict, True),
        ("duration_s", _NUMBER, False),
        ("rss_bytes", int, False),
        ("hwm_bytes", int, True),
        ("stats", dict, False),
    ],
}


def json_object(data: bytes, *, say_why: bool) -> dict[str, Any]:
    """One message's bytes read as a JSON object, the first check of every channel's messages.

    Args:
        data: the message as it came off the channel.
        say_why: add the JSON parser's own words to the error (the local channel does; the Slurm
            wire, whose bytes come from the network, names only the length and the first bytes).

    Returns:
        The object.

    Raises:
        ProtocolError: not UTF-8 JSON, or JSON that is not an object.
    """
    try:
        msg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        why = f": {err}" if say_why else ""
        raise ProtocolError(
            f"a message that is not JSON ({len(data)} bytes starting {data[:16]!r}){why}"
        ) from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"a message that is a JSON {type(msg).__name__}, not an object")
    return msg


def parse_message(data: bytes) -> dict[str, Any]:
    """Parse and check one worker message.

    Raises:
        ProtocolError: not UTF-8 JSON, not an object, an unknown ``op``, or a field missing or of
            the wrong type.
    """
    msg = json_object(data, say_why=True)
    op = msg.get("op")
    fields = _SCHEMA.get(op) if isinstance(op, str) else None
    if fields is None:
        raise ProtocolError(f"a message with the unknown op {op!r}")
    for key, types, optional in fields:
        _need(msg, key, types, optional=optional)
    if op == "result" and msg["status"] not in WORKER_RESULT_STATUSES:
        raise ProtocolError(f"a result with the unknown status {msg['status']!r}")
    return msg


class MessageReader:
    """Supervisor side of the worker -> supervisor pipe: non-blocking, framed, size-capped.

    ``fileno()`` makes it usable with ``multiprocessing.connection.wait``. It reads a pipe's fd,
    or a socket (the channel on Windows, where ``wait`` takes socket handles, not fds).
    """

    __slots__ = ("_fd", "_sock", "_buf", "max_bytes", "closed")

    def __init__(self, fd: int | socket.socket, max_bytes: int) -> None:
        self._sock = fd if isinstance(fd, socket.socket) else None
        if isinstance(fd, socket.socket):
            fd.setblocking(False)
            fd = fd.fileno()
        else:
            os.set_blocking(fd, False)
        self._fd = fd
        self._buf = bytearray()
        self.max_bytes = max_bytes
        self.closed = False

    def fileno(self) -> int:
        return self._fd

    def read(self) -> list[dict[str, Any]]:
        """The complete messages available now (possibly none).

        Raises:
            EOFError: the worker's end is closed and no complete message is left.
            ProtocolError: a frame over ``max_bytes``, or a frame that is no message.
        """
        eof = False
        while True:
            if len(self._buf) >= _HEADER and int.from_bytes(self._buf[:_HEADER], "big") > self.max_bytes:
                break  # do not read (and hold) more of a frame that will be refused anyway
            try:
                # a pipe gives at most its capacity (64 KiB) a read; a larger buffer would only cost
                # an mmap and an munmap per read (glibc's threshold is 128 KiB)
                chunk = os.read(self._fd, _CHUNK) if self._sock is None else self._sock.recv(_CHUNK)
            except BlockingIOError:
                break
            except ConnectionResetError:
                eof = True  # a socket whose worker was killed (Windows resets its connections)
                break
            except InterruptedError:
                continue
            if not chunk:
                eof = True
                break
            self._buf += chunk
            if len(chunk) < _CHUNK:
                break  # drained: a further read would only say so (EOF shows at the next wake-up)
        out: list[dict[str, Any]] = []
        buf = self._buf
        while len(buf) >= _HEADER:
            size = int.from_bytes(buf[:_HEADER], "big")
            if size > self.max_bytes:
                raise ProtocolError(
                    f"a message of {size} bytes, over the cap of {self.max_bytes} bytes "
                    "(raise max_result_bytes if results are meant to be this large)"
                )
            if len(buf) < _HEADER + size:
                break
            frame = bytes(buf[_HEADER : _HEADER + size])
            del buf[: _HEADER + size]
            out.append(parse_message(frame))
        if eof and not out:
            raise EOFError
        return out

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._buf = bytearray()
        try:
            if self._sock is not None:
                self._sock.close()
            else:
                os.close(self._fd)
        except OSError:
            pass


class PipePair:
    """The supervisor's ends of a worker's two pipes, and the fds the child inherits."""

    __slots__ = ("to_worker", "from_worker", "child_read_fd", "child_write_fd")

    def __init__(self, max_message_bytes: int) -> None:
        down_r, down_w = os.pipe()  # supervisor -> worker
        up_r, up_w = os.pipe()  # worker -> supervisor
        for fd in (down_w, up_r):
            os.set_inheritable(fd, False)
        self.to_worker = Connection(down_w, readable=False, writable=True)
        self.from_worker = MessageReader(up_r, max_message_bytes)
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
        try:
            self.to_worker.close()
        except OSError:
            pass
        self.from_worker.close()


def child_connections(read_fd: int, write_fd: int) -> tuple[Connection, int]:
    """Worker side: the inbox connection, and the raw fd to :func:`write_message` on."""
    return Connection(read_fd, readable=True, writable=False), write_fd
