"""The warm-call engine, parent side: Runner slots served one job at a time through a bridge.

A *slot* is one ordinary Runner trial (``{"slot": i}``) of a slot function (worker side:
:class:`trainguard.guarded._slot.BaseSlot`). It connects to this process's *bridge* (a unix
socket in a private 0700 folder, with a random 32-byte authkey that travels only inside the
pickled slot function), says which slot it is, and is handed the next job waiting, or "stop".
A job is whatever one caller wants run (an Optuna trial, one call of an ``@isolated`` function, one
notebook cell); the job's own ``open`` and ``converse`` methods speak with the slot while it runs
(the Optuna trial's proxy calls, a call's streamed output and its returned value). The Runner's
result of the slot (its value, or the worker killed for memory or time, or crashed) resolves the
job. So the Runner's own protocol, policy, recycling, limits and store stay as they are: a warm
worker takes one slot after another until the policy recycles it.

Threads: the driver (iterates ``Runner.imap`` over chunks of slots), the listener (accepts bridge
connections), one handler per connected slot. ``_cond`` guards the queues.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.guarded._wire import bridge_family

__all__ = ["BaseJob", "CallPool"]


class BaseJob:
    """One unit of work handed to a slot; subclasses say how to open it and talk while it runs.

    ``result`` is the Runner's result of the slot that ran it (None until then); ``error`` is set
    instead when the pool could not run it. ``done`` is set once both the Runner's result has come
    and the slot's conversation has ended (or the pool gave up on the job).
    """

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.slot: int | None = None
        self.done = threading.Event()
        self._result_in = threading.Event()
        self._talk_over = threading.Event()

    def open(self, conn: Connection) -> None:
        """Send the slot the message that starts this job (an OSError gives the job back)."""
        raise NotImplementedError

    def converse(self, conn: Connection) -> None:
        """Answer the slot until it hangs up (``EOFError``/``OSError`` end the conversation)."""

    # -- resolution (called by the pool) ----------------------------------------------------------

    def _resolve(self, result: Any) -> None:
        self.result = result
        self._result_in.set()
        self._maybe_done()

    def _talk_ended(self) -> None:
        self._talk_over.set()
        self._maybe_done()

    def _fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def _maybe_done(self) -> None:
        if self._result_in.is_set() and self._talk_over.is_set():
            self.done.set()

    def wait(self, poll: Callable[[], None] | None = None, interval_s: float = 0.05) -> None:
        """Wait until done; ``poll()`` runs every ``interval_s`` meanwhile (to relay output). A
        conversation still open 5 s after the Runner's result came is given up on."""
        result_seen_at: float | None = None
        while not self.done.wait(interval_s):
            if poll is not None:
                poll()
            if self._result_in.is_set():
                if result_seen_at is None:
                    result_seen_at = time.monotonic()
                elif time.monotonic() - result_seen_at > 5.0:
                    self.done.set()
        if poll is not None:
            poll()


class CallPool:
    """Runner slots in a background thread, and the bridge that hands them jobs.

    Args:
        runner: the :class:`trainguard.Runner` that runs the slots (its policy recycles, limits
            and kills as for any trial).
        make_slot: ``make_slot(address, authkey) -> slot function`` (a picklable
            :class:`~trainguard.guarded._slot.BaseSlot`).
        slots: slots one Runner session takes (a session that runs out starts another).
        name: the run name's stem in the store.
        idle_limit_s: a slot that has waited this long for a job is told "stop", so that a policy
            ``timeout`` (which counts a slot's wait too) never ends a worker in the middle of the
            next job; None waits for ever.
    """

    def __init__(
        self,
        runner: Any,
        make_slot: Callable[[str, bytes], Any],
        slots: int,
        name: str,
        *,
        idle_limit_s: float | None = None,
    ) -> None:
        self._runner = runner
        self._make_slot = make_slot
        self._chunk = max(1, slots)
        self._name = name
        self._idle_limit_s = idle_limit_s
        self._cond = threading.Condition()
        self._pending: deque[BaseJob] = deque()
        self._assigned: dict[int, BaseJob] = {}
        self._live_handlers: set[int] = set()
        self._finished: set[int] = set()
        self._closed = False
        self._fatal: BaseException | None = None
        self._started = False
        self._dir: str | None = None
        self._listener: Listener | None = None
        self._threads: list[threading.Thread] = []
        self._next_slot = 0
        self._slot_fn: Any = None

    @property
    def runner(self) -> Any:
        return self._runner

    # -- life cycle -------------------------------------------------------------------------------

    def _start(self) -> None:
        from trainguard._tempdirs import make_dir

        self._dir = make_dir("bridge")
        os.chmod(self._dir, 0o700)
        family = bridge_family()
        # a named pipe (Windows) gets a random name of multiprocessing's own
        address: str | None = os.path.join(self._dir, "bridge") if family == "AF_UNIX" else None
        authkey = os.urandom(32)
        self._listener = Listener(address, family=family, authkey=authkey)
        address = str(self._listener.address)
        self._slot_fn = self._make_slot(address, authkey)
        for target, name in ((self._accept_loop, "listener"), (self._drive, "driver")):
            thread = threading.Thread(target=target, name=f"trainguard-pool-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._started = True

    def submit(self, job: BaseJob, closed_message: str) -> BaseJob:
        """Queue ``job`` for the next free slot (the pool starts on the first job)."""
        with self._cond:
            if self._closed:
                raise ConfigError(closed_message)
            if self._fatal is not None:
                job._fail(self._fatal)
                return job
            if not self._started:
                self._start()
            self._pending.append(job)
            self._cond.notify_all()
        return job

    def close(self, timeout_s: float = 30.0) -> None:
        """Tell waiting slots to stop, end the workers (killed after ``timeout_s``), remove the
        bridge; jobs still waiting fail (idempotent)."""
        if not self._close_once():
            return
        driver = self._threads[1]
        driver.join(timeout_s)
        if driver.is_alive():  # a worker still in a job or starting: end it
            self._kill_workers()
            driver.join(10.0)
        self._after_driver()

    def abort(self) -> None:
        """Stop now, as Ctrl-C stops a run (the caller was interrupted): the Runner's session ends
        interrupted, its busy workers killed by its own shutdown and recorded so (workers shut
        down, attempts interrupted, their trials pending), rather than killed under it, which it
        would record as crashes and replace; then as :meth:`close` (idempotent)."""
        if not self._close_once():
            return
        driver = self._threads[1]
        if self._runner._interrupt():
            driver.join(10.0)  # the session's poll, then its shutdown
        if driver.is_alive():  # no session iterating yet, or one that did not end: end its workers
            self._kill_workers()
            driver.join(10.0)
        self._after_driver()

    def reusable(self) -> bool:
        """Whether the pool can take more jobs: not closed, and its driver has not failed.

        Returns:
            True when a job submitted now would be run.
        """
        with self._cond:
            return not self._closed and self._fatal is None

    def _close_once(self) -> bool:
        """Mark the pool closed; True when it had started and was not closed before."""
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            self._cond.notify_all()
        return self._started

    def _after_driver(self) -> None:
        """The bridge closed and removed; every job still waiting or assigned fails."""
        if self._listener is not None:
            # a thread blocked in accept() is not woken by close() on Linux: connect once (the
            # authkey challenge fails, and the loop sees the pool closed), then close
            _wake(self._listener.address)
            self._threads[0].join(5.0)
            try:
                self._listener.close()
            except OSError:
                pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        with self._cond:
            stranded = list(self._pending) + list(self._assigned.values())
            self._pending.clear()
            self._assigned.clear()
        for job in stranded:
            job._fail(ConfigError("the pool was closed while this job waited for a worker"))

    def _kill_workers(self) -> None:
        from trainguard.process import kill_worker_tree

        progress = self._runner.progress()
        for worker in progress.workers if progress is not None else ():
            if worker.pid:
                kill_worker_tree(worker.pid)  # the worker, its process group and every descendant

    # -- driver -----------------------------------------------------------------------------------

    def _drive(self) -> None:
        chunk = 0
        try:
            while not self._closed:
                base, self._next_slot = self._next_slot, self._next_slot + self._chunk
                params = [{"slot": base + i} for i in range(self._chunk)]
                results = self._runner.imap(self._slot_fn, params, name=f"{self._name}-{chunk}")
                try:
                    for result in results:
                        self._on_result(result)
                        with self._cond:
                            if self._closed and not self._assigned:
                                break
                finally:
                    results.close()
                chunk += 1
        except BaseException as err:  # noqa: BLE001 - every waiting job must learn why
            if isinstance(err, KeyboardInterrupt) and self._closed:
                # abort()'s own stop (a signal never lands in this thread): the pool was closed
                err = ConfigError("the pool was stopped while this job ran or waited for a worker")
            with self._cond:
                self._fatal = err
                jobs = list(self._pending) + list(self._assigned.values())
                self._pending.clear()
                self._assigned.clear()
            for job in jobs:
                job._fail(err)

    def _on_result(self, result: Any) -> None:
        slot = int(result.params["slot"])
        with self._cond:
            if slot in self._live_handlers:
                self._finished.add(slot)
            job = self._assigned.pop(slot, None)
        if job is not None:
            job._resolve(result)

    # -- bridge -----------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                conn = listener.accept()
            except Exception:  # noqa: BLE001 - a client that failed the authkey challenge, or went away
                if self._closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), name="trainguard-bridge", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        from trainguard.guarded._wire import recv_json, send_json

        slot: int | None = None
        job: BaseJob | None = None
        try:
            hello = recv_json(conn)
            slot = int(hello["slot"])
            with self._cond:
                self._live_handlers.add(slot)
            job = self._take(conn, slot)
            if job is None:
                send_json(conn, {"op": "stop"})
                return
            try:
                job.open(conn)
            except OSError:
                self._give_back(slot, job)
                job = None
                return
            job.converse(conn)
        except (EOFError, OSError, ValueError, KeyError):
            return
        finally:
            with self._cond:
                if slot is not None:
                    self._live_handlers.discard(slot)
                    self._finished.discard(slot)
            conn.close()
            if job is not None:
                job._talk_ended()

    def _take(self, conn: Connection, slot: int) -> BaseJob | None:
        waited_from = time.monotonic()
        with self._cond:
            while True:
                if self._closed or slot in self._finished:
                    return None
                if self._idle_limit_s is not None and time.monotonic() - waited_from > self._idle_limit_s:
                    return None  # this worker's slot ends before the policy's timeout could
                if self._pending:
                    # the worker sends nothing while it waits: readable means it has gone
                    if conn.poll(0):
                        return None
                    job = self._pending.popleft()
                    self._assigned[slot] = job
                    job.slot = slot
                    return job
                self._cond.wait(0.5)

    def _give_back(self, slot: int, job: BaseJob) -> None:
        with self._cond:
            if self._assigned.get(slot) is job:
                del self._assigned[slot]
                self._pending.appendleft(job)
                self._cond.notify_all()


def _wake(address: str) -> None:
    """Connect once to the bridge so that a thread blocked in ``accept()`` returns (the authkey
    challenge fails, and the accept loop sees the pool closed)."""
    try:
        if bridge_family() == "AF_UNIX":
            with socket.socket(socket.AF_UNIX) as wake:
                wake.settimeout(2.0)
                wake.connect(address)
        else:
            Client(address, family="AF_PIPE").close()  # no authkey: the listener's challenge fails
    except OSError:
        pass
