"""The node side of the Slurm backend: a pilot job that hosts guarded workers.

A pilot is one Slurm job (submitted by :class:`~trainguard.runner.backends.slurm.SlurmPilotBackend` through
submitit). It connects back to the driver over TCP (``multiprocessing.connection``: an HMAC
challenge with the run's random token before any byte is unpickled), says where it runs and whether
the trial function loads there, and then is a node-local supervisor of up to ``slots`` workers:
the Ray backend's :class:`~trainguard.runner.backends.ray.SlotAgent`, the same code, starts each worker
with the local backend's :func:`~trainguard.runner.backends.local.start_local_worker`, samples its tree,
asks the local sampler's :func:`~trainguard.runner.policy.limit_verdict` next to it (limits, timeout,
pressure and its grace), kills and ends it, and hands over the worker's message bytes, samples,
pressure, kills and exit, which the pilot forwards to the driver. The driver
keeps the queue, the policy, retries and the store; a pilot never opens the store.

The pilot ends when the driver says so, and also when the driver is gone (its connection closes):
its workers end with it, so a SIGKILLed driver leaves no trial running on the cluster.

Slurm's pre-timeout signal (submitit submits with ``--signal=USR2@<signal_delay_s>``) is taken
over from submitit's handler: the pilot tells the driver that its job is about to end, the driver
starts no new worker on it, submits a replacement pilot, and asks every staged trial running there
to leave at its next checkpoint (it resumes from it on another pilot); the job is not requeued.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from trainguard.runner.backends.base import WorkerSpec
from trainguard.runner.backends.ray import SlotAgent, _probe_fn
from trainguard.runner.backends.slurm_folder import check_private_file
from trainguard.runner.backends.slurm_wire import (
    ProtocolError,
    encode,
    fn_digest,
    receive,
    spec_from_wire,
    to_events,
)

__all__ = ["Pilot", "PilotAgent"]

logger = logging.getLogger(__name__)

#: how long an agent's poll waits for samples alone before handing them over
_POLL_S = 0.25
#: what the driver may send
_FROM_DRIVER = frozenset({"start", "send", "kill", "shutdown"})
#: the umask the job started with (the trial's), kept while the pilot's own files are private
_USER_UMASK: int | None = None


class PilotAgent(SlotAgent):
    """The shared slot agent, with what differs on a Slurm node: where it runs (the job, not a Ray
    node), and each worker's share of the GPUs Slurm gave the job instead of Ray's."""

    def __init__(
        self,
        pilot: int,
        policy: Any,
        interval_s: float,
        uss: bool,
        job_id: str | None,
        *,
        only_slot: bool = False,
    ) -> None:
        self.job_id = job_id
        super().__init__(pilot, policy, interval_s, uss, only_slot=only_slot)

    def where(self) -> dict[str, Any]:
        return {"host": platform.node(), "job_id": self.job_id, "agent_pid": os.getpid()}

    def start_on_gpus(
        self, spec: WorkerSpec, env_overrides: dict[str, str], gpus: str | None
    ) -> dict[str, Any]:
        """Start a worker that sees ``gpus`` (its share of the job's), or all of the job's (None).

        Slurm signals every process of the job, so the worker starts with the pre-timeout signal
        ignored (an ignored signal stays ignored across exec): it is the pilot's notice, and its
        default action would end a trial that should leave at its next checkpoint instead."""
        overrides = env_overrides if gpus is None else {**env_overrides, "CUDA_VISIBLE_DEVICES": gpus}
        previous = None
        with contextlib.suppress(ValueError):  # not the main thread: nothing to hold back
            previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        mask = os.umask(_USER_UMASK) if _USER_UMASK is not None else None  # the trial's own umask
        try:
            # None: the job's GPUs, as Ray's are kept
            return self.start_worker(spec, overrides, keep_gpus=gpus is None)
        finally:
            if mask is not None:
                os.umask(mask)
            if previous is not None:
                signal.signal(signal.SIGUSR2, previous)


def split_gpus(visible: str | None, slots: int, per_worker: int) -> list[str | None]:
    """Each local slot's ``CUDA_VISIBLE_DEVICES`` from the job's (None: leave the job's as is)."""
    if not visible or per_worker <= 0:
        return [None] * slots
    ids = [g for g in visible.split(",") if g.strip()]
    out: list[str | None] = []
    for slot in range(slots):
        share = ids[slot * per_worker : (slot + 1) * per_worker]
        out.append(",".join(share) if share else None)
    return out


# the object's own repr and identity, as before: a repr would show the run's token and function
@dataclass(frozen=True, slots=True, kw_only=True, repr=False, eq=False)
class Pilot:
    """What a pilot job runs (a picklable callable; submitit ships it)."""

    address: tuple[str, int]
    #: the run's HMAC key for the connection back
    token: bytes
    pilot: int
    slots: int
    gpus_per_worker: int
    policy: Any
    interval_s: float
    uss: bool
    fn: tuple[str, Any] | None
    sys_path: list[str]
    only_slot: bool = False

    def __call__(self) -> str:
        from multiprocessing.connection import Client

        job_id = os.environ.get("SLURM_JOB_ID")
        conn = Client(
            (str(self.address[0]), int(self.address[1])), authkey=self.token
        )  # the challenge both ways
        send_lock = threading.Lock()

        def send(obj: dict[str, Any]) -> None:
            data = encode(obj)
            with send_lock:
                conn.send_bytes(data)

        problem = None
        if self.fn is not None:
            problem = _probe_fn(self.fn[0], self.fn[1], self.sys_path)
        send(
            {
                "op": "hello",
                "pilot": self.pilot,
                "job_id": job_id,
                "host": platform.node(),
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "pid": os.getpid(),
                "problem": problem,
            }
        )
        if problem is not None:
            conn.close()
            return f"the trial function does not load on {platform.node()}: {problem}"
        agent = PilotAgent(
            self.pilot, self.policy, self.interval_s, self.uss, job_id, only_slot=self.only_slot
        )
        notice: list[str] = []

        def pre_timeout(signum: int, frame: Any) -> None:
            # the forwarder says it (a send here could meet a held send lock)
            if signum == signal.SIGTERM:
                notice.append("Slurm is ending the job (SIGTERM: scancel, preemption or the time limit)")
            else:
                notice.append("Slurm's pre-timeout signal (the job's time limit is near)")

        # submitit's own handlers requeue on USR2 and ignore SIGTERM: the driver decides instead
        with contextlib.suppress(ValueError):  # not the main thread: no notices
            signal.signal(signal.SIGUSR2, pre_timeout)
            signal.signal(signal.SIGTERM, pre_timeout)
        done = threading.Event()
        forwarder = threading.Thread(
            target=self._forward,
            args=(agent, send, done, notice, conn),
            name="trainguard-pilot-out",
            daemon=True,
        )
        forwarder.start()
        try:
            self._serve(conn, agent, send)
        finally:
            agent.shutdown()
            done.set()
            forwarder.join(timeout=5.0)
            with contextlib.suppress(Exception):
                send({"op": "events", "events": to_events(agent.poll(0.0))})
            conn.close()
        return "done"

    def _serve(self, conn: Any, agent: Any, send: Any) -> None:
        """The driver's commands, one at a time, until it says ``shutdown`` or is gone."""
        gpus = split_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), self.slots, self.gpus_per_worker)
        local_slot: dict[int, int] = {}
        while True:
            try:
                command = receive(conn, _FROM_DRIVER)
            except ProtocolError as err:
                logger.warning(
                    "pilot %d: the driver sent no message of the wire (%s); ending", self.pilot, err
                )
                return
            except (EOFError, OSError):
                logger.warning("pilot %d: the driver is gone; ending its workers", self.pilot)
                return
            op = command["op"]
            if op == "start":
                worker_id, index = command["worker_id"], command["index"]
                local_slot[worker_id] = index
                try:
                    spec = spec_from_wire(command["spec"])
                    overrides = {str(k): str(v) for k, v in command["overrides"].items()}
                    info = agent.start_on_gpus(spec, overrides, gpus[index % max(1, len(gpus))])
                except Exception as err:  # noqa: BLE001 - the driver decides what it means
                    send(
                        {
                            "op": "start_failed",
                            "worker_id": worker_id,
                            "message": f"{type(err).__name__}: {err}",
                        }
                    )
                    continue
                send({"op": "started", "worker_id": worker_id, "info": info})
            elif op == "send":
                agent.send(command["worker_id"], self._own_fn(command["msg"]))
            elif op == "kill":
                agent.kill(command["worker_id"])
            elif op == "shutdown":
                return

    def _own_fn(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A ``fn`` message of kind "pickle" names the function by digest: the pilot's own copy
        (from its private pickle) goes to the worker; a digest it does not hold is an error there."""
        if msg.get("op") != "fn" or msg.get("kind") != "pickle":
            return msg
        if self.fn is not None and self.fn[0] == "pickle" and fn_digest(self.fn[1]) == msg.get("payload"):
            return {**msg, "payload": self.fn[1]}
        # a worker told to load nothing says fn_error: the driver records it in words
        return {**msg, "kind": "module", "payload": "trainguard-slurm-pilot:function-not-held"}

    def _forward(self, agent: Any, send: Any, done: threading.Event, notice: list[str], conn: Any) -> None:
        """The agent's events to the driver; a signal's notice first. After SIGTERM the pilot
        stops: its connection is shut, which ends the command loop and then the workers."""
        told = 0
        while not done.is_set():
            fresh, told = notice[told:], len(notice)
            try:
                for words in fresh:
                    send({"op": "ending", "why": words, "terminating": "SIGTERM" in words})
                    if "SIGTERM" in words:
                        _shut(conn)
                        return
                events = agent.poll(_POLL_S)
                if events:
                    send({"op": "events", "events": to_events(events)})
            except (OSError, EOFError):
                return


def _shut(conn: Any) -> None:
    """Shut a connection's socket both ways: a ``recv`` blocked on it in another thread returns."""
    import socket

    with contextlib.suppress(OSError, ValueError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _checked_pickle(folder: str, job_id: str, wait_s: float = 60.0) -> str | None:
    """None once the job's pickle is a private file of this user in a private folder of theirs
    (the driver makes it so right after ``sbatch``: a moment is allowed); else why not."""
    import time

    path = os.path.join(folder.replace("%j", job_id), f"{job_id}_submitted.pkl")
    deadline = time.monotonic() + wait_s
    while True:
        why = check_private_file(path)
        if why is None or time.monotonic() > deadline or "owned by" in why:
            return why
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    """The job's command: ``python -m trainguard.runner.backends.slurm_pilot -u -m
    submitit.core._submit FOLDER``. Its logs and files private, the pickle checked, then submitit's
    own entry point loads and runs the pilot."""
    import runpy

    # run as __main__, this module is a second copy: the pickled Pilot uses the imported one
    from trainguard.runner.backends import slurm_pilot

    slurm_pilot._USER_UMASK = os.umask(0o077)
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o600)
    folder = argv[-1]
    why = _checked_pickle(folder, os.environ.get("SLURM_JOB_ID", ""))
    if why is not None:
        print(f"trainguard pilot: refusing to unpickle the job: {why}", file=sys.stderr, flush=True)
        return 1
    sys.argv = [sys.argv[0], folder]
    runpy.run_module("submitit.core._submit", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
