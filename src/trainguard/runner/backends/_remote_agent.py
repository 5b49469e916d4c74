"""The driver's side of a worker that a node-local agent runs: what the Ray and Slurm backends share.

A remote backend starts each worker next to a node-local agent (Ray's
:class:`~trainguard.runner.backends.ray.SlotAgent` actor, or the same agent inside a Slurm pilot job),
which samples, limits, kills and ends it there and hands the driver a stream of events::

    ("out", worker_id, bytes)                      the worker's message bytes
    ("sample", worker_id, rss, uss, gpu)           a sample of its tree
    ("kill", worker_id, status, limit, value, message, split|None)   the verdict killed its trial
    ("pressure", worker_id, rule, rss, message, values, delivered)   the verdict raised pressure
    ("exit", worker_id, rc, oom_kills_before, oom_kills_after)       the worker ended

On the driver, :class:`RemoteWorker` is the session's handle on such a worker: its inbox is a local
pipe into which the events' bytes are written, so the session parses and checks them exactly as it
does a local worker's; samples, kills, pressure and the exit are kept for the session's next look.
:class:`AgentLink` is the driver's end of one agent (a Ray actor's pump, a pilot's connection):
its workers by id, and :meth:`AgentLink.dispatch`, the one place events reach their handles.
What differs per backend is only how a message or a kill travels (:meth:`RemoteWorker.send`,
:meth:`RemoteWorker.kill`) and how an agent that stopped answering is told (:meth:`RemoteWorker._unreported`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from typing import Any

from trainguard.process.charge import MemorySplit
from trainguard.runner._protocol import MessageReader
from trainguard.runner.backends.base import BaseWorker, Inbox, WorkerSpec
from trainguard.runner.policy import EndCause, KillDecision, PressureDecision, classify_end

__all__ = ["AgentLink", "RemoteWorker"]

#: how long a killed worker's end may take to be reported before its agent counts as lost
END_REPORT_S = 30.0


class RemoteWorker(BaseWorker):
    """The driver's handle on a worker that a node-local agent runs (see the module docstring).

    Subclasses say how a message and a kill reach the agent (:meth:`send`, :meth:`kill`), where the
    worker runs (:attr:`where`) and what an unreported end means (:meth:`_unreported`)."""

    enforces_limits = True

    def __init__(self, spec: WorkerSpec, info: dict[str, Any]) -> None:
        self.worker_id = spec.worker_id
        self.slot = spec.slot
        self.pid = int(info["pid"])
        self.started_wall = float(info["started_wall"])
        self.tracking = str(info["tracking"])
        self.host = str(info.get("host") or "")
        self.node_id = info.get("node_id")
        self.agent_pid = info.get("agent_pid")  # the agent's process: its capture folder is named for it
        read_fd, self._write_fd = os.pipe()
        os.set_inheritable(read_fd, False)
        os.set_inheritable(self._write_fd, False)
        self._inbox = MessageReader(read_fd, spec.max_message_bytes)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._latest: tuple[int, int | None] | None = None
        self._peak: tuple[int, int | None] | None = None
        self._gpu: int | None = None
        self._kill: KillDecision | None = None
        self._raised: tuple[PressureDecision, bool] | None = None
        self._rc: int | None = None
        self._oom: tuple[int | None, int | None] = (None, None)
        self._lost: str | None = None
        self._exited = threading.Event()
        self._closed = False

    # -- events from the agent (:meth:`AgentLink.dispatch`) --

    def _deliver(self, data: bytes) -> None:
        # under the write lock: the fd must not be closed (and its number reused) mid-write
        with self._write_lock:
            view = memoryview(data)
            while view and self._write_fd >= 0:
                try:
                    written = os.write(self._write_fd, view)
                except OSError:
                    return  # the session closed the inbox: nothing waits for these bytes
                view = view[written:]

    def _sample(self, rss: int, uss: int | None, gpu: int | None) -> None:
        with self._lock:
            self._latest = (rss, uss)
            if self._peak is None or rss > self._peak[0]:
                self._peak = (rss, uss)
            if gpu is not None:
                self._gpu = max(self._gpu or 0, gpu)

    def _killed(
        self, status: str, limit: float, value: float, message: str, memory: list[Any] | None = None
    ) -> None:
        split = None if memory is None else MemorySplit(*memory)
        with self._lock:
            self._kill = KillDecision(status, limit, value, message, split)  # type: ignore[arg-type]

    def _pressure(
        self, rule: str, rss_bytes: int, message: str, values: dict[str, Any], delivered: bool
    ) -> None:
        decision = PressureDecision(rule, rss_bytes, message, values)  # type: ignore[arg-type]
        with self._lock:
            self._raised = (decision, delivered)

    def _exit(self, rc: int | None, oom_before: int | None, oom_after: int | None) -> None:
        with self._lock:
            if self._exited.is_set():
                return
            self._rc, self._oom = rc, (oom_before, oom_after)
        self._close_write()
        self._exited.set()

    def _lose(self, cause: str) -> None:
        """The agent is gone (its node, actor or job): the worker ended with ``cause`` in words."""
        with self._lock:
            if self._exited.is_set():
                return
            self._lost = cause
        self._close_write()
        self._exited.set()

    def _close_write(self) -> None:
        with self._write_lock:
            fd, self._write_fd = self._write_fd, -1
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _unreported(self) -> None:
        """The agent did not report the worker's end :data:`END_REPORT_S` after it was killed."""
        self._lose(
            f"the agent running worker {self.worker_id} on {self.host or 'its node'} did not "
            f"report the worker's end {END_REPORT_S:g} s after it was killed"
        )

    # -- BaseWorker --

    @property
    def inbox(self) -> Inbox:
        return self._inbox

    @property
    def kill_decision(self) -> KillDecision | None:
        return self._kill

    def pressure_raised(self) -> tuple[PressureDecision, bool] | None:
        with self._lock:
            raised, self._raised = self._raised, None
        return raised

    def trial_started(self) -> None:
        with self._lock:
            self._raised = None  # an earlier trial's, arrived after its result

    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        with self._lock:
            if rediscover:  # "now": the agent sampled right before it forwarded the result
                return self._latest
            reading, self._peak = self._peak, None
            return reading if reading is not None else self._latest

    def gpu_bytes(self, gpu_by_pid: dict[int, int] | None) -> int | None:
        with self._lock:
            gpu, self._gpu = self._gpu, None
        return gpu

    def pids(self) -> tuple[int, ...]:
        return (self.pid,)  # on another host: the driver's NVML cannot see them anyway

    def wait(self, timeout_s: float | None) -> int | None:
        if not self._exited.wait(timeout_s):
            return None
        return self._rc

    def end(self, grace_s: float) -> tuple[int | None, bool]:
        killed = False
        if not self._exited.wait(grace_s):
            self.kill()
            killed = True
            self._exited.wait(END_REPORT_S)
        if not self._closed:
            self._closed = True
            self._inbox.close()  # first: a pump blocked writing into a full pipe gets EPIPE and lets go
            self._close_write()
        if not self._exited.is_set():
            self._unreported()
        return self._rc, killed

    def classify(self, returncode: int | None, *, in_trial: bool, kill: KillDecision | None) -> EndCause:
        if self._lost is not None:
            detail = {"exitcode": None, "node_id": self.node_id, "host": self.host, "why": self._lost}
            return EndCause("crashed" if in_trial else None, "node_lost", detail, self._lost)
        cause = classify_end(
            returncode,
            in_trial=in_trial,
            kill=kill,
            oom_kills_before=self._oom[0],
            oom_kills_after=self._oom[1],
        )
        cause.detail.setdefault("host", self.host)
        return cause


class AgentLink:
    """The driver's end of one node-local agent: its workers by id, and the dispatch of its events.

    ``forget_on_exit``: a worker leaves :attr:`workers` when its exit event comes (Ray's slots);
    otherwise its handle removes itself when the session ends it (a pilot's worker place)."""

    forget_on_exit = False

    def __init__(self) -> None:
        self.workers: dict[int, RemoteWorker] = {}
        self.lock = threading.Lock()

    def dispatch(self, events: Iterable[tuple[Any, ...]]) -> None:
        """Each event to its worker's handle; events of a worker the link no longer knows are dropped."""
        for event in events:
            kind, worker_id = event[0], event[1]
            with self.lock:
                worker = self.workers.get(worker_id)
            if worker is None:
                continue
            if kind == "out":
                worker._deliver(event[2])
            elif kind == "sample":
                worker._sample(event[2], event[3], event[4])
            elif kind == "kill":
                worker._killed(*event[2:])
            elif kind == "pressure":
                worker._pressure(*event[2:])
            elif kind == "exit":
                worker._exit(*event[2:])
                if self.forget_on_exit:
                    with self.lock:
                        self.workers.pop(worker_id, None)

    def lose_all(self, cause: str, *, forget: bool = False) -> None:
        """The agent is gone: every worker it ran ends with ``cause`` (and, with ``forget``, leaves)."""
        with self.lock:
            workers = list(self.workers.values())
            if forget:
                self.workers = {}
        for worker in workers:
            worker._lose(cause)
