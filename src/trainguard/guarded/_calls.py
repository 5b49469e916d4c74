"""Calls in a warm guarded worker (parent side): the one engine of ``@trainguard.isolated`` and
the ``%%trainguard`` notebook cell, on :class:`~trainguard.guarded._pool.CallPool`.

A call's arguments go by value (cloudpickle, checked one by one first: :mod:`._send`); the
function's output streams back while it runs; its value, or its exception as the same type
(the worker's traceback in its notes), comes back over the bridge. A worker killed at the
policy's memory limit or crashed ends the call with the Runner's error for that cause
(``MemoryLimitError``, ``WorkerCrashedError``...); a call that runs past ``timeout`` has its worker
killed and raises ``TrialTimeoutError``. The timeout is the engine's own, from the moment the job
reaches its worker, rather than the policy's: a warm worker's slot also counts the time it waits
for the next call, which would cut a later call short.
"""

from __future__ import annotations

import builtins
import dataclasses
import queue
import sys
import threading
import time
import uuid
import weakref
from multiprocessing.connection import Connection
from typing import Any

from trainguard.exceptions import FAILURE_ERRORS, ConfigError, TrialError, TrialTimeoutError, WorkerError
from trainguard.guarded._pool import BaseJob, CallPool
from trainguard.guarded._slot import CallSlot
from trainguard.guarded._wire import recv_json, send_json

__all__ = ["CallJob", "GuardedCalls"]


class CallJob(BaseJob):
    """One call: its pickled ``(args, kwargs)``, the output it streams, the reply."""

    def __init__(self, payload: bytes) -> None:
        super().__init__()
        self.payload = payload
        self.output: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self.reply: dict[str, Any] | None = None
        self.reply_bytes: bytes | None = None
        self.worker_pid: int | None = None
        self.opened_at: float | None = None

    def open(self, conn: Connection) -> None:
        send_json(conn, {"op": "call"})
        conn.send_bytes(self.payload)
        self.opened_at = time.monotonic()

    def converse(self, conn: Connection) -> None:
        while True:
            message = recv_json(conn)  # EOFError when the call is over or the worker died
            op = message.get("op")
            if op == "out":
                self.output.put((str(message.get("stream")), str(message.get("text"))))
            elif op in ("return", "raise", "unsendable"):
                if op == "return" or message.get("pickled"):
                    self.reply_bytes = conn.recv_bytes()
                self.reply = message

    def relay(self) -> None:
        """Write what the call printed so far to this process's stdout/stderr (the caller's
        thread: in a notebook, the running cell)."""
        while True:
            try:
                stream, text = self.output.get_nowait()
            except queue.Empty:
                return
            target = sys.stderr if stream == "stderr" else sys.stdout
            target.write(text)
            target.flush()


def _rebuilt(reply: dict[str, Any], data: bytes | None) -> BaseException:
    """The worker's exception as the same type where it can be rebuilt, its traceback in a note."""
    exc: BaseException | None = None
    if data is not None:
        import cloudpickle

        try:
            exc = cloudpickle.loads(data)
        except Exception:  # noqa: BLE001 - a class this process cannot import: rebuilt by name below
            exc = None
    if not isinstance(exc, BaseException):
        qualified = str(reply.get("type") or "")
        module, _, name = qualified.rpartition(".")
        cls = getattr(builtins, name, None) if module == "builtins" else None
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                exc = cls(reply.get("message"))
            except Exception:  # noqa: BLE001 - another signature
                exc = None
        if exc is None:
            exc = TrialError(f"{qualified}: {reply.get('message')}", exc_type=qualified)
    note = f"raised in a trainguard worker:\n{reply.get('traceback', '').rstrip()}"
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]
    return exc


class GuardedCalls:
    """A function whose calls run in a warm guarded worker (a :class:`CallPool` of
    :class:`CallSlot`), one call at a time, recycled by the policy as the Runner does.

    Args:
        fn: the function (sent as :func:`trainguard.runner.prepare_fn` makes it: by reference when
            importable, else by value).
        what: how errors name it (``"the function train"``, ``"the cell"``).
        timeout_s: a call's limit, from the moment its worker receives it (None: none).
        policy, runner_options: the Runner's (``store`` defaults to None).
    """

    def __init__(
        self,
        fn: Any,
        *,
        what: str,
        policy: Any,
        timeout_s: float | None,
        name: str | None = None,
        slots: int = 1000,
        **runner_options: Any,
    ) -> None:
        from trainguard.runner import Runner
        from trainguard.runner import prepare_fn as prepare

        try:
            spec = prepare(fn)
        except ConfigError as err:
            raise ConfigError(f"{what} cannot be sent to a worker process: {err}", value=repr(fn)) from err
        runner_options.setdefault("store", None)
        self.what = what
        self.timeout_s = timeout_s
        self.policy = policy
        self._runner_options = runner_options
        self._lock = threading.Lock()
        self._runner = Runner(
            workers=1, policy=dataclasses.replace(policy, on_error="continue"), **runner_options
        )
        stem = name or f"isolated-{spec.ref.rpartition(':')[2]}-{uuid.uuid4().hex[:8]}"
        self._pool = CallPool(
            self._runner,
            lambda address, authkey: CallSlot(address, authkey, spec.kind, spec.payload, spec.ref),
            slots,
            stem,
        )
        self._finalizer = weakref.finalize(self, _close, self._pool, self._runner)

    @property
    def runner(self) -> Any:
        return self._runner

    def call(self, payload: bytes) -> Any:
        """Run one call (``payload``: cloudpickled ``(args, kwargs)``) and return its value."""
        job = CallJob(payload)
        with self._lock:  # one call at a time: a second caller waits for the warm worker
            self._pool.submit(job, f"{self.what} was closed: decorate it again")
            timed_out = self._wait(job)
        return self._outcome(job, timed_out)

    def _wait(self, job: CallJob) -> bool:
        timed_out = False

        def poll() -> None:
            nonlocal timed_out
            job.relay()
            if (
                self.timeout_s is not None
                and not timed_out
                and job.opened_at is not None
                and job.reply is None
                and time.monotonic() - job.opened_at > self.timeout_s
            ):
                timed_out = True
                self._kill_current()

        try:
            job.wait(poll)
        except KeyboardInterrupt:
            self._kill_current()  # the worker must not go on running what the caller stopped
            job.wait(job.relay)
            raise
        return timed_out

    def _kill_current(self) -> None:
        from trainguard.process import kill_worker_tree

        progress = self._runner.progress()
        for worker in progress.workers if progress is not None else ():
            if worker.pid:
                kill_worker_tree(worker.pid)

    def _outcome(self, job: CallJob, timed_out: bool) -> Any:
        if job.error is not None:
            raise job.error
        reply = job.reply
        if reply is not None and reply["op"] == "return":
            import cloudpickle

            return cloudpickle.loads(job.reply_bytes or b"")
        if reply is not None and reply["op"] == "raise":
            raise _rebuilt(reply, job.reply_bytes)
        if reply is not None and reply["op"] == "unsendable":
            raise ConfigError(f"{self.what}: {reply['message']}")
        result = job.result
        peak = getattr(result, "peak_rss_bytes", None)
        if timed_out:
            raise TrialTimeoutError(
                f"{self.what} ran past its timeout of {self.timeout_s:g}s and its worker was killed",
                status="timeout",
                timeout_s=self.timeout_s,
                peak_rss_bytes=peak,
            )
        error = getattr(result, "error", None) if result is not None else None
        status = error.status if error is not None else "crashed"
        message = (error.message if error is not None else "") or "its worker ended before it returned"
        cls = FAILURE_ERRORS.get(status, WorkerError)
        raise cls(f"{self.what}: {message}", status=status, peak_rss_bytes=peak)

    def close(self) -> None:
        """End the worker (idempotent)."""
        self._finalizer()


def _close(pool: CallPool, runner: Any) -> None:
    try:
        pool.close()
    finally:
        runner.close()
