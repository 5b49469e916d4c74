"""The Ray backend: the same supervised workers, on the nodes of a Ray cluster.

Shape. One Ray actor per worker slot (:class:`SlotAgent`), scheduled with the slot's CPUs, GPUs
and custom resources and spread over the nodes, is a node-local supervisor for that slot's
trainguard worker process: it starts the worker with the local backend's own code
(:func:`~trainguard.runner.backends.local.start_local_worker`, so the worker is the same
``python -m trainguard.runner.worker.process`` with its own process group, cgroup or subreaper), samples
its process tree with :mod:`trainguard.process` (and its GPU memory with NVML by pid, its tmpfs
files and its memory by kind as the local sampler reads them) at the session's interval, asks the
same :func:`~trainguard.runner.policy.limit_verdict` as the local sampler (hard limits and timeout,
the soft limit's pressure, which it signals to the worker there, and ``pressure_grace``), kills and
ends the tree there, and forwards the worker's message bytes, its samples, its pressure, its kills
and its exit to the driver. The driver keeps the
session: the queue, the policy's recycling and retries, and the store (the single source of truth,
so a run resumes by name after the driver restarts, whatever happened to the cluster).

On the driver, :class:`RayWorker` is the :class:`~trainguard.runner.backends.base.BaseWorker` handle
(the remote handle the Slurm backend's workers share, :mod:`trainguard.runner.backends._remote_agent`):
its inbox is a local pipe into which a pump thread (one per actor, dispatching the actor's events
as a Slurm pilot's are) writes the bytes the worker wrote, so the session parses and checks them exactly as it does a local worker's (a trial that
writes garbage onto the channel is a ``protocol_error`` in the same place). An actor that dies
(its node removed or lost, its process killed) ends its worker's handle with a cause in words,
recorded as the attempt's error and retried per the policy like any crash; the slot's next worker
starts in a new actor, on a node that is alive.

Ray is imported only here, and only when a Ray backend is made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import select
import shutil
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import ConfigError, missing
from trainguard.process.charge import MemorySplit
from trainguard.process.watch import Schedule
from trainguard.runner.backends._remote_agent import END_REPORT_S, AgentLink, RemoteWorker
from trainguard.runner.backends.base import BaseBackend, BaseWorker, WorkerSpec
from trainguard.runner.policy import (
    RATE_WINDOW_S,
    LimitReading,
    Policy,
    PressureSince,
    growth_rate,
    limit_verdict,
)

if TYPE_CHECKING:
    from trainguard.runner.policy import KillDecision, PressureDecision

__all__ = ["RayClusterBackend", "RayWorker", "SlotAgent", "parse_resources"]

logger = logging.getLogger(__name__)

_HEADER = 4
#: how long the driver waits for an actor to start a worker, and for a killed worker's end
_START_TIMEOUT_S = 120.0
_POLL_S = 0.25


def _import_ray() -> Any:
    if importlib.util.find_spec("ray") is None:
        raise missing("ray", "the Ray backend (Runner(backend='ray'), trainguard run --backend ray)", "ray")
    import ray

    return ray


def parse_resources(value: Mapping[str, Any] | str | None) -> dict[str, float]:
    """What one worker slot reserves on a node: ``{"CPU": 1, "GPU": 1, "my_resource": 2}`` or the
    CLI's ``"CPU=1,GPU=1,my_resource=2"``. Default: one CPU."""
    if value is None:
        return {"CPU": 1.0}
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            key, sep, amount = part.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"resources {value!r}: write NAME=AMOUNT pairs such as 'CPU=2,GPU=1'")
            pairs[key.strip()] = amount.strip()
        value = pairs
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"resources must be a dict such as {{'CPU': 2, 'GPU': 1}}, not {type(value).__name__}"
        )
    out: dict[str, float] = {}
    for key, amount in value.items():
        name = {"cpu": "CPU", "cpus": "CPU", "gpu": "GPU", "gpus": "GPU"}.get(str(key).lower(), str(key))
        try:
            number = float(amount)
        except (TypeError, ValueError):
            number = -1.0
        if isinstance(amount, bool) or number < 0 or number != number:
            raise ConfigError(f"resources: {key}={amount!r} must be a number >= 0, such as {key}=1")
        out[name] = number
    out.setdefault("CPU", 1.0)
    return out


def _format_resources(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


# -- the node side ---------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Hosted:
    """One worker process that an agent runs, and what the agent knows about its trial."""

    worker: Any  # LocalWorker
    fd: int
    max_bytes: int
    buf: bytearray = dataclasses.field(default_factory=bytearray)
    raw: bool = False  # a frame over the cap went by: the rest is forwarded unparsed
    trial_started: float | None = None
    kill: KillDecision | None = None
    #: the pressure raised on the running trial (the verdict's ``pressure_grace`` runs from it)
    pressure: PressureSince | None = None
    #: the last seconds of ``(monotonic_s, rss_bytes)`` samples, for the growth rate
    series: deque[tuple[float, int]] = dataclasses.field(default_factory=deque)
    ended: bool = False


class SlotAgent:
    """The node-local supervisor of one worker slot (made a Ray actor by :class:`RayClusterBackend`).

    Its methods are called by the driver; one thread of its own reads the workers' pipes and
    samples their trees. Events for the driver wait in a list that :meth:`poll` hands over.
    ``only_slot``: the run has this one worker slot, so a trial running here is the run's only one
    (a new tmpfs file that no process holds open may then be its, as the local sampler's ``sole``).
    """

    def __init__(
        self, slot: int, policy: Policy, interval_s: float, uss: bool, *, only_slot: bool = False
    ) -> None:
        self.slot, self.policy, self.interval_s, self.uss = slot, policy, interval_s, uss
        self.only_slot = only_slot
        self._hosted: dict[int, _Hosted] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._events: list[tuple[Any, ...]] = []
        self._urgent = False
        self._stop = threading.Event()
        from trainguard._tempdirs import make_dir

        self._tmpdir = make_dir("ray")  # removed at shutdown; swept on this node if the actor is killed
        self._nvml = None
        try:
            from trainguard.probes.nvml import gpu_memory_by_pid, nvml_available

            if nvml_available():
                self._nvml = gpu_memory_by_pid
        except ImportError:
            self._nvml = None
        self._thread = threading.Thread(target=self._loop, name="trainguard-ray-agent", daemon=True)
        self._thread.start()

    # -- called by the driver --

    def where(self) -> dict[str, Any]:
        import platform

        node_id = None
        with contextlib.suppress(Exception):
            import ray

            node_id = ray.get_runtime_context().get_node_id()
        return {"host": platform.node(), "node_id": node_id, "agent_pid": os.getpid()}

    def start_worker(
        self, spec: WorkerSpec, env_overrides: dict[str, str], *, keep_gpus: bool = True
    ) -> dict[str, Any]:
        """Start one worker here; with ``keep_gpus`` it sees the GPUs this process was given (by
        Ray for an actor, by Slurm for a pilot job) whatever the overrides say."""
        from trainguard.runner.backends.local import start_local_worker

        env = dict(os.environ)
        ray_gpus = env.get("CUDA_VISIBLE_DEVICES")
        env.update(env_overrides)
        if ray_gpus is not None and keep_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ray_gpus  # the GPUs Ray gave this slot's actor
        local = dataclasses.replace(spec, env=env, capture_dir=self._tmpdir)
        worker = start_local_worker(local)
        hosted = _Hosted(worker, worker.inbox.fileno(), spec.max_message_bytes)
        with self._lock:
            self._hosted[spec.worker_id] = hosted
        return {
            "pid": worker.pid,
            "tracking": worker.tracking,
            "started_wall": worker.started_wall,
            **self.where(),
        }

    def send(self, worker_id: int, msg: dict[str, Any]) -> None:
        with self._lock:
            hosted = self._hosted.get(worker_id)
            if hosted is None or hosted.ended:
                return
            if msg.get("op") == "trial":
                hosted.trial_started = time.monotonic()
                hosted.kill = None
                hosted.pressure = None
        if msg.get("op") == "trial":
            self._guarded(hosted.worker.trial_started)  # what is in /dev/shm now is not the trial's
        elif msg.get("op") == "stage_reply" and not msg.get("go_on"):
            # the trial leaves at its checkpoint and goes on elsewhere: its tmpfs files stay
            self._guarded(lambda: hosted.worker.trial_ended(remove=False))
        try:
            hosted.worker.send(msg)
        except OSError:
            pass  # it died: its end reaches the driver as an "exit" event

    def kill(self, worker_id: int) -> None:
        with self._lock:
            hosted = self._hosted.get(worker_id)
        if hosted is not None and not hosted.ended:
            hosted.worker.kill()

    def poll(self, timeout_s: float) -> list[tuple[Any, ...]]:
        """The events since the last call. Returns at once for a message, a kill or an exit; samples
        alone wait for ``timeout_s`` and go in one batch (a round trip per sample would cost the
        trial's CPU on a busy node; the driver keeps each batch's highest reading)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._urgent:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            events, self._events = self._events, []
            self._urgent = False
        return events

    def shutdown(self) -> None:
        """End every worker this agent runs (the driver is done with the slot)."""
        self._stop.set()
        with self._lock:
            hosted = list(self._hosted.values())
        for h in hosted:
            if not h.ended:
                h.worker.kill()
        self._thread.join(timeout=10.0)
        shutil.rmtree(self._tmpdir, ignore_errors=True)  # each actor's capture folder, empty or not

    # -- the agent's own thread --

    def _emit(self, *event: Any) -> None:
        with self._cond:
            self._events.append(event)
            if event[0] != "sample":
                self._urgent = True
                self._cond.notify_all()

    def _loop(self) -> None:
        # the watchdog's schedule (trainguard.process.watch), driven from this select loop because
        # the agent also waits on its workers' pipes
        schedule = Schedule(self.interval_s, start_now=True)
        while not self._stop.is_set():
            with self._lock:
                live = {h.fd: h for h in self._hosted.values() if not h.ended}
            delay = schedule.delay()
            if live:
                try:
                    readable, _, _ = select.select(list(live), [], [], delay)
                except (OSError, ValueError):
                    readable = []
            else:
                time.sleep(min(delay, 0.05))
                readable = []
            for fd in readable:
                try:
                    self._read(live[fd])
                except Exception:  # noqa: BLE001 - one worker's fault must not stop the agent
                    logger.exception("agent of slot %d: reading a worker failed", self.slot)
            if schedule.due():
                try:
                    self._sample()
                except Exception:  # noqa: BLE001 - the sampler must outlive any one bad reading
                    logger.exception("agent of slot %d: sampling failed", self.slot)
        with self._lock:
            hosted = [h for h in self._hosted.values() if not h.ended]
        for h in hosted:
            self._finish(h, grace_s=3.0)

    def _read(self, hosted: _Hosted) -> None:
        eof = False
        while True:
            try:
                chunk = os.read(hosted.fd, 1 << 16)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError:
                eof = True
                break
            if not chunk:
                eof = True
                break
            hosted.buf += chunk
        self._forward(hosted)
        if eof:
            if hosted.buf:  # a torn frame: the driver's reader names it
                self._emit("out", hosted.worker.worker_id, bytes(hosted.buf))
                hosted.buf.clear()
            self._finish(hosted, grace_s=5.0)

    def _forward(self, hosted: _Hosted) -> None:
        """Forward whole frames; a result ends the trial's clock and is preceded by a fresh sample
        (the driver reads the tree's size after the trial from it)."""
        buf = hosted.buf
        wid = hosted.worker.worker_id
        if hosted.raw:
            if buf:
                self._emit("out", wid, bytes(buf))
                buf.clear()
            return
        while len(buf) >= _HEADER:
            size = int.from_bytes(buf[:_HEADER], "big")
            if size > hosted.max_bytes:
                hosted.raw = True  # the driver refuses it by its header; nothing to parse here
                self._emit("out", wid, bytes(buf))
                buf.clear()
                return
            if len(buf) < _HEADER + size:
                return
            frame = bytes(buf[: _HEADER + size])
            del buf[: _HEADER + size]
            op = None
            with contextlib.suppress(Exception):
                op = json.loads(frame[_HEADER:]).get("op")
            if op == "result":
                with self._lock:
                    hosted.trial_started = None
                self._sample_one(hosted, rediscover=True)
                # its tmpfs files are no longer watched and stay where they are (as before the
                # verdict read them here); a killed trial's go with its worker, as locally
                self._guarded(lambda: hosted.worker.trial_ended(remove=False))
            self._emit("out", wid, frame)

    def _sample(self) -> None:
        with self._lock:
            hosted = [h for h in self._hosted.values() if not h.ended]
        gpu_map = self._nvml() if self._nvml is not None and hosted else None
        for h in hosted:
            self._sample_one(h, gpu_map=gpu_map)

    def _sample_one(self, hosted: _Hosted, *, rediscover: bool = False, gpu_map: Any = None) -> None:
        """One sample of a worker's tree, sent to the driver; with its trial running, the verdict
        (:func:`~trainguard.runner.policy.limit_verdict`, the local sampler's own) carried out here."""
        try:
            reading = hosted.worker.read(uss=self.uss, rediscover=rediscover)
        except Exception:  # noqa: BLE001 - a lost sample is harmless
            return
        if reading is None:
            return
        rss, uss = reading
        gpu = hosted.worker.gpu_bytes(gpu_map)
        now = time.monotonic()
        with self._lock:
            started, kill, since = hosted.trial_started, hosted.kill, hosted.pressure
        running = started is not None and kill is None and not rediscover
        split = self._split(hosted, rss) if running else None
        hosted.series.append((now, rss))
        while hosted.series and hosted.series[0][0] < now - RATE_WINDOW_S:
            hosted.series.popleft()
        # what the driver records: the RSS, or more while tmpfs holds what the tree has not mapped
        self._emit("sample", hosted.worker.worker_id, rss if split is None else split.seen_bytes, uss, gpu)
        if not running or started is None:
            return
        rate = growth_rate(list(hosted.series)) if self.policy.soft_limit is not None else None
        verdict = limit_verdict(
            self.policy, LimitReading(rss, gpu, now - started, split, rate, now), pressure=since
        )
        if verdict.pressure is not None:
            self._raise_pressure(hosted, started, verdict.pressure, now)
        decision = verdict.kill
        if decision is None:
            return
        with self._lock:
            if hosted.trial_started != started:
                return
            hosted.kill = decision
        hosted.worker.kill()
        memory = decision.memory
        self._emit(
            "kill",
            hosted.worker.worker_id,
            decision.status,
            decision.limit,
            decision.value,
            decision.message,
            None if memory is None else _split_to_list(memory),
        )

    def _split(self, hosted: _Hosted, rss: int) -> MemorySplit | None:
        """The tree's memory by kind and in tmpfs where it could change the verdict (the local
        worker's own reading, :meth:`~trainguard.runner.backends.local.LocalWorker.memory_split`);
        None when not needed or unreadable (the RSS then counts)."""
        with self._lock:
            running = sum(1 for h in self._hosted.values() if h.trial_started is not None and not h.ended)
        try:
            split: MemorySplit | None = hosted.worker.memory_split(
                rss,
                limit_bytes=self.policy.memory_limit,
                sole=self.only_slot and running == 1,
                private=False,  # data= (the case for private memory) cannot reach a node
            )
            return split
        except Exception:  # noqa: BLE001 - a sampler fault must never end the worker
            logger.exception("agent of slot %d: reading the tmpfs memory of a worker failed", self.slot)
            return None

    def _raise_pressure(
        self, hosted: _Hosted, started: float, decision: PressureDecision, now: float
    ) -> None:
        """The verdict raised pressure: kept for the grace, signalled to the worker, told to the driver."""
        with self._lock:
            if hosted.trial_started != started:
                return
            hosted.pressure = PressureSince(now, decision.message)
        delivered = hosted.worker.signal_pressure()
        logger.info("worker %d under memory pressure: %s", hosted.worker.worker_id, decision.message)
        self._emit(
            "pressure",
            hosted.worker.worker_id,
            decision.rule,
            decision.rss_bytes,
            decision.message,
            dict(decision.values),
            delivered,
        )

    def _guarded(self, call: Any) -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 - the tmpfs watch is an aid to the verdict, never a fault
            logger.exception("agent of slot %d: the tmpfs watch failed", self.slot)

    def _finish(self, hosted: _Hosted, grace_s: float) -> None:
        with self._lock:
            if hosted.ended:
                return
            hosted.ended = True
        from trainguard.runner.backends.local import cgroup_oom_kills

        worker = hosted.worker
        try:
            rc, _ = worker.end(grace_s)
        except Exception:  # noqa: BLE001 - the driver must still hear of the end
            logger.exception("agent of slot %d: ending worker %d failed", self.slot, worker.worker_id)
            rc = None
        self._emit("exit", worker.worker_id, rc, worker.oom_kills_at_start, cgroup_oom_kills())
        with self._lock:
            self._hosted.pop(worker.worker_id, None)


def _split_to_list(split: MemorySplit) -> list[int | None]:
    """A :class:`~trainguard.process.charge.MemorySplit` as the kill event carries it (JSON-ready)."""
    return [
        split.anon_bytes,
        split.file_bytes,
        split.shmem_bytes,
        split.tmpfs_bytes,
        split.cgroup_shmem_bytes,
    ]


# -- the driver side -------------------------------------------------------------------------------


class RayWorker(RemoteWorker):
    """The driver's handle on a worker that a :class:`SlotAgent` runs on some node."""

    def __init__(self, spec: WorkerSpec, actor: Any, info: dict[str, Any]) -> None:
        super().__init__(spec, info)
        self._actor = actor

    @property
    def where(self) -> dict[str, Any]:
        return {"backend": "ray", "host": self.host, "node_id": self.node_id, "agent_pid": self.agent_pid}

    def send(self, msg: dict[str, Any]) -> None:
        if self._exited.is_set():
            raise OSError(f"worker {self.worker_id} has ended")
        self._actor.send.remote(self.worker_id, msg)

    def kill(self) -> None:
        if not self._exited.is_set():
            with contextlib.suppress(Exception):
                self._actor.kill.options(concurrency_group="control").remote(self.worker_id)

    def _unreported(self) -> None:
        self._lose(
            f"the Ray actor running worker {self.worker_id} on {self.host or 'its node'} did not "
            f"report the worker's end {END_REPORT_S:g} s after it was killed"
        )


class _Slot(AgentLink):
    """The driver's side of one slot's actor: the actor, its pump thread, its workers."""

    forget_on_exit = True

    def __init__(self, backend: RayClusterBackend, slot: int, actor: Any) -> None:
        super().__init__()
        self.backend = backend
        self.slot = slot
        self.actor = actor
        self.dead: str | None = None
        self.closing = False
        self.node_id: str | None = None
        self.host = ""
        self.thread = threading.Thread(target=self._pump, name=f"trainguard-ray-slot{slot}", daemon=True)

    def _pump(self) -> None:
        ray = self.backend._ray
        while not self.closing:
            try:
                events = ray.get(
                    self.actor.poll.options(concurrency_group="poll").remote(_POLL_S), timeout=60.0
                )
            except ray.exceptions.GetTimeoutError:
                continue
            except Exception as err:  # noqa: BLE001 - the actor or its node is gone
                if self.closing:
                    return
                self._died(err)
                return
            self.dispatch(events)

    def _died(self, err: BaseException) -> None:
        cause = self.backend._death_cause(self, err)
        self.dead = cause
        logger.warning("slot %d: %s", self.slot, cause)
        self.lose_all(cause, forget=True)


class RayClusterBackend(BaseBackend):
    """Workers on a Ray cluster, one node-local :class:`SlotAgent` actor per worker slot: the running
    backend a :class:`~trainguard.runner.backends.typed.RayBackend` builds.

    Args:
        address: the cluster (``"auto"``, ``"HOST:PORT"`` of its head, ``"ray://HOST:PORT"``), or None
            for Ray's own default (``RAY_ADDRESS``, else a Ray started on this machine). Ignored when
            this process is already connected (``ray.init`` was called).
        resources: what one worker slot reserves on a node: ``{"CPU": 1}`` by default; ``"GPU"`` and
            custom resources as Ray names them.
        connect_timeout: seconds to wait for the head's address to answer before saying there is no
            cluster there.

    Raises:
        MissingDependencyError: ray is not installed.
        ConfigError: a malformed address or resources.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        resources: Mapping[str, Any] | str | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        if importlib.util.find_spec("ray") is None:
            raise missing(
                "ray", "the Ray backend (Runner(backend='ray'), trainguard run --backend ray)", "ray"
            )
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ConfigError(f"address={address!r} must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
        self.address = address.strip() if address else None
        if self.address not in (None, "auto"):
            _split_address(self.address)  # a malformed address or port fails before any work
        self.resources = parse_resources(resources)
        self.connect_timeout_s = float(connect_timeout)
        self._ray: Any = None
        self._agent_cls: Any = None
        self._slots: dict[int, _Slot] = {}
        self._policy: Policy | None = None
        self._interval_s = 0.1
        self._uss = False
        self._only_slot = False
        self._started_ray = False

    @property
    def threads(self) -> int:
        """Threads per worker that match the slot's CPUs."""
        return max(1, int(self.resources.get("CPU", 1)))

    # -- connecting and checking --

    def _tcp_check(self) -> None:
        """Say at once when nothing listens at the address (``ray.init`` would retry for minutes)."""
        address = self.address
        if address in (None, "auto"):
            return
        host, port_n = _split_address(address)
        try:
            with socket.create_connection((host or "127.0.0.1", port_n), timeout=self.connect_timeout_s):
                pass
        except OSError as err:
            raise ConfigError(
                f"no Ray cluster at {address}: nothing answered there within {self.connect_timeout_s:g} s "
                f"({err.strerror or err}); start one with `ray start --head` or give the head's HOST:PORT"
            ) from None

    def _answers_as_a_head(self) -> None:
        """Say within the connect timeout when what listens at a HOST:PORT address is not a Ray
        head (a server that accepts and never answers, an HTTP server): ``ray.init`` would hang
        there for minutes, or answer after half a minute with twenty lines of warnings."""
        address = self._explicit_gcs_address()
        if address is None:
            return
        code = _gcs_probe(address, self.connect_timeout_s)
        if code in ("DEADLINE_EXCEEDED", "UNAVAILABLE"):
            why = "did not answer" if code == "DEADLINE_EXCEEDED" else "did not answer as a Ray head (gRPC)"
            raise ConfigError(
                f"no Ray cluster at {address}: something accepted the connection but {why} within "
                f"{self.connect_timeout_s:g} s; give the HOST:PORT that `ray start --head` printed"
            )

    def connect(self) -> Any:
        """Connect to the cluster (once); the ``ray`` module."""
        ray = _import_ray()
        self._ray = ray
        if ray.is_initialized():
            self._same_cluster(ray)
            return ray
        self._tcp_check()
        self._answers_as_a_head()
        self._token_auth()
        try:
            ray.init(
                address=self.address,
                logging_level=logging.WARNING,
                configure_logging=False,
                log_to_driver=True,
            )
        except ConnectionError as err:
            where = self.address or "the default address"
            raise ConfigError(
                f"could not join a Ray cluster at {where}: {err}; check it is the head's GCS address "
                "(HOST:PORT of `ray start --head`) and, if the head uses token authentication, that "
                "RAY_AUTH_TOKEN (or ~/.ray/auth_token) here holds the head's token (`ray get-auth-token` "
                "on the head), or pass address='auto' on a node of the cluster"
            ) from err
        self._started_ray = True
        return ray

    def _explicit_gcs_address(self) -> str | None:
        """The ``HOST:PORT`` of a head's GCS the user named, or None (the default, ``auto``, or a
        Ray Client ``ray://`` address)."""
        address = self.address
        if address is None or address == "auto" or address.startswith("ray://"):
            return None
        return address

    def _same_cluster(self, ray: Any) -> None:
        """Refuse an explicit ``HOST:PORT`` other than the cluster this process is connected to
        (``ray.init`` was called): it would be ignored, and the run would go to the other one."""
        address = self._explicit_gcs_address()
        if address is None:
            return
        try:
            connected = str(ray.get_runtime_context().gcs_address)
        except Exception:  # noqa: BLE001 - cannot tell: keep the connection
            return
        if not _same_endpoint(address, connected):
            raise ConfigError(
                f"this process is already connected to the Ray cluster at {connected} (ray.init was "
                f"called), not to address={address!r}: call ray.shutdown() first, or pass "
                "address=None to run on the connected cluster"
            )

    def _token_auth(self) -> None:
        """Use Ray's token authentication when the head at an explicit ``HOST:PORT`` requires it.

        Ray (2.5x and later) starts ``ray start --head`` with token authentication whenever a token
        exists on the machine (``~/.ray/auth_token``, which any local ``ray.init()`` writes), and
        a driver that joins by ``address="auto"`` picks the token up; one that joins by an explicit
        address never does, so its calls are refused (``InvalidAuthToken``) and ``ray.init``
        gives up after about 20 s with a bare "Failed to connect". So: ask the head (one gRPC
        call, a few ms) whether it wants a token; if it does, turn token mode on in this process as
        Ray does for "auto" (``RAY_AUTH_MODE=token``) when a token is at hand, else say what to do.
        A head without authentication is joined as before (turning token mode on there would kill
        the slot actors), and an explicit ``RAY_AUTH_MODE`` is respected.
        """
        address = self._explicit_gcs_address()
        if address is None:
            return
        if _head_wants_token(address, self.connect_timeout_s) is not True:
            return
        mode = os.environ.get("RAY_AUTH_MODE")
        if mode is not None and mode.lower() != "token":
            raise ConfigError(
                f"the Ray cluster at {address} requires token authentication, but RAY_AUTH_MODE={mode} "
                "here: unset RAY_AUTH_MODE (or set it to token) and give this process the head's token "
                "in RAY_AUTH_TOKEN (`ray get-auth-token` on the head)"
            )
        if mode is None and not _enable_token_auth():
            raise ConfigError(
                f"the Ray cluster at {address} requires token authentication and this process has no "
                "token: set RAY_AUTH_TOKEN to the head's token (`ray get-auth-token` on the head), or "
                "start the head with RAY_AUTH_MODE=disabled"
            )

    def check(self, *, fn: Any, policy: Policy, slots: int, data: Any = None) -> None:
        if data is not None:
            raise ConfigError(
                "data= (arrays shared through /dev/shm) cannot be shipped to Ray nodes: load the data "
                "inside the trial function, or use backend='local'"
            )
        ray = self.connect()
        self._check_resources(ray)
        self._check_fn(ray, fn)

    def _alive_nodes(self, ray: Any) -> list[dict[str, Any]]:
        return [n for n in ray.nodes() if n.get("Alive")]

    def _check_resources(self, ray: Any) -> None:
        need = {k: v for k, v in self.resources.items() if v > 0}
        nodes = self._alive_nodes(ray)
        if any(all(n["Resources"].get(k, 0) >= v for k, v in need.items()) for n in nodes):
            return
        short = []
        for key, amount in sorted(need.items()):
            best = max((n["Resources"].get(key, 0) for n in nodes), default=0)
            if best < amount:
                short.append(f"{key}={amount:g} (the most any node has is {best:g})")
        what = ", ".join(short) or f"{_format_resources(need)} together"
        raise ConfigError(
            f"no node of the Ray cluster has what one worker slot asks for: {what}; lower resources= "
            f"or add a node that has them ({len(nodes)} node{'s' if len(nodes) != 1 else ''} alive)"
        )

    def _check_fn(self, ray: Any, fn: Any) -> None:
        """Load the function on every node before any trial: a module or file a node lacks, or a
        pickled function that needs one, is refused in one line naming the node."""
        if fn is None or fn.kind not in ("module", "file", "pickle"):
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = ray.remote(num_cpus=0, max_retries=0)(_probe_fn)
        nodes = self._alive_nodes(ray)
        refs = [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                fn.kind, fn.payload, [p for p in sys.path if p]
            )
            for n in nodes
        ]
        for node, ref in zip(nodes, refs, strict=True):
            try:
                problem = ray.get(ref, timeout=60.0)
            except Exception as err:  # noqa: BLE001 - e.g. the payload itself failed to travel
                problem = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if problem:
                raise ConfigError(
                    f"fn {fn.ref} cannot be shipped to the Ray cluster: on node {node.get('NodeManagerAddress')} "
                    f"it fails to load ({problem}); install its module on every node, or pass a function "
                    "defined in the driver's script"
                )

    # -- sessions --

    def open(self, *, slots: int, policy: Policy, sample_interval_s: float = 0.1, uss: bool = False) -> None:
        ray = self.connect()
        self._only_slot = slots == 1
        self._policy = policy
        self._interval_s = sample_interval_s
        self._uss = uss
        for slot in range(slots):
            self._slot(slot, ray)

    def _slot(self, slot: int, ray: Any) -> _Slot:
        current = self._slots.get(slot)
        if current is not None and current.dead is None:
            return current
        if self._agent_cls is None:
            # the default group runs start_worker/send/shutdown one at a time, in the order sent;
            # the long poll and kills each have a thread of their own, so neither waits behind it
            self._agent_cls = ray.remote(concurrency_groups={"poll": 1, "control": 1})(SlotAgent)
        custom = {k: v for k, v in self.resources.items() if k not in ("CPU", "GPU") and v > 0}
        actor = self._agent_cls.options(
            num_cpus=self.resources.get("CPU", 1.0),
            num_gpus=self.resources.get("GPU", 0.0),
            resources=custom or None,
            scheduling_strategy="SPREAD",
            max_restarts=0,
            max_concurrency=1,
        ).remote(slot, self._policy or Policy(), self._interval_s, self._uss, only_slot=self._only_slot)
        state = _Slot(self, slot, actor)
        state.thread.start()
        self._slots[slot] = state
        return state

    def start(self, spec: WorkerSpec) -> BaseWorker:
        ray = self.connect()
        base = os.environ
        overrides = {k: v for k, v in spec.env.items() if base.get(k) != v}
        for attempt in range(2):
            state = self._slot(spec.slot, ray)
            try:
                info = ray.get(state.actor.start_worker.remote(spec, overrides), timeout=_START_TIMEOUT_S)
            except Exception as err:  # noqa: BLE001 - the actor could not start or died: try a new one
                if attempt == 0 and state.dead is None:
                    state.closing = True
                    state.dead = self._death_cause(state, err)
                    continue
                from trainguard.exceptions import WorkerCrashedError

                raise WorkerCrashedError(
                    f"worker slot {spec.slot} could not start on the Ray cluster: {state.dead or err}"
                ) from err
            state.node_id, state.host = info.get("node_id"), str(info.get("host") or "")
            worker = RayWorker(spec, state.actor, info)
            with state.lock:
                state.workers[spec.worker_id] = worker
            if state.dead is not None:  # died between the start and now
                worker._lose(state.dead)
            return worker
        raise AssertionError("unreachable")

    def _death_cause(self, state: _Slot, err: BaseException) -> str:
        node_alive = None
        if state.node_id is not None:
            with contextlib.suppress(Exception):
                for node in self._ray.nodes():
                    if node.get("NodeID") == state.node_id:
                        node_alive = bool(node.get("Alive"))
        where = f"node {state.node_id[:12]} ({state.host})" if state.node_id else "its node"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if node_alive is False:
            return f"the Ray node running worker slot {state.slot} was lost ({where} is dead: {first})"
        return (
            f"the Ray actor hosting worker slot {state.slot} on {where} died ({type(err).__name__}: {first})"
        )

    def close(self) -> None:
        ray = self._ray
        slots, self._slots = list(self._slots.values()), {}
        for state in slots:
            state.closing = True
        for state in slots:
            if state.dead is None and ray is not None:
                with contextlib.suppress(Exception):
                    ray.get(state.actor.shutdown.remote(), timeout=15.0)
                with contextlib.suppress(Exception):
                    ray.kill(state.actor, no_restart=True)
        for state in slots:
            state.thread.join(timeout=2.0)


def _same_endpoint(a: str, b: str) -> bool:
    """Whether two ``HOST:PORT`` name the same endpoint: the same port, and hosts that resolve to
    the same address or are both this machine (loopback or one of its interfaces)."""
    host_a, _, port_a = a.rpartition(":")
    host_b, _, port_b = b.rpartition(":")
    if port_a != port_b:
        return False

    def resolve(host: str) -> str:
        try:
            return socket.gethostbyname(host.strip("[]"))
        except OSError:
            return host

    ip_a, ip_b = resolve(host_a), resolve(host_b)
    if ip_a == ip_b:
        return True
    import psutil

    local = {"127.0.0.1", "::1"} | {
        addr.address for addrs in psutil.net_if_addrs().values() for addr in addrs
    }
    return (ip_a in local or ip_a.startswith("127.")) and (ip_b in local or ip_b.startswith("127."))


#: a call every Ray head serves (GCS), refused with UNAUTHENTICATED when it requires a token
_GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"


def _split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://HOST:PORT`` address.

    Raises:
        ConfigError: no port, a port that is not a number, or one outside 1-65535.
    """
    hostport = address.removeprefix("ray://")
    if ":" not in hostport:
        raise ConfigError(f"address={address!r} is not 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
    host, _, port = hostport.rpartition(":")
    try:
        port_n = int(port)
    except ValueError:
        raise ConfigError(f"address={address!r}: the port {port!r} is not a number") from None
    if not 1 <= port_n <= 65535:
        raise ConfigError(
            f"address={address!r}: the port {port_n} is not a TCP port (1-65535); Ray's head listens on "
            "6379 unless `ray start --head --port` said otherwise"
        )
    return host, port_n


def _gcs_probe(address: str, timeout_s: float) -> str | None:
    """One gRPC call to the Ray head (GCS) at ``HOST:PORT``: ``"OK"``, the status code's name it
    failed with, or None when it cannot be made (grpcio missing)."""
    try:
        import grpc  # installed with ray[default] and ray[client]
    except ImportError:
        return None
    channel = grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)])
    try:
        call = channel.unary_unary(_GCS_PROBE, request_serializer=bytes, response_deserializer=bytes)
        call(b"", timeout=timeout_s)
        return "OK"
    except grpc.RpcError as err:
        code = err.code() if callable(getattr(err, "code", None)) else None
        return getattr(code, "name", None)
    finally:
        channel.close()


def _head_wants_token(address: str, timeout_s: float) -> bool | None:
    """Whether the Ray head (GCS) at ``HOST:PORT`` refuses a call without a token; None when that
    cannot be told (grpcio missing, another answer)."""
    code = _gcs_probe(address, timeout_s)
    if code == "OK":
        return False
    return True if code == "UNAUTHENTICATED" else None


def _enable_token_auth() -> bool:
    """Turn Ray's token authentication on in this process (``RAY_AUTH_MODE=token``, as Ray itself
    does for ``address="auto"``) if a token is at hand (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``
    or ``~/.ray/auth_token``); whether it is now on."""
    try:
        from ray._private.authentication import authentication_token_setup as setup
    except ImportError:  # a Ray without token authentication
        return False
    quiet = logging.getLogger(setup.__name__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its "token authentication is enabled" notice: we say what we do
    try:
        return bool(setup.maybe_enable_token_auth_if_token_available(warn_if_disabled=False))
    finally:
        quiet.setLevel(level)


def _pickled_modules(payload: bytes) -> set[str]:
    """The top-level modules a pickle refers to (its GLOBAL and STACK_GLOBAL opcodes), read without
    unpickling it, so that checking a node imports nothing heavy there."""
    import pickletools

    modules: set[str] = set()
    strings: list[Any] = []
    memo: dict[int, Any] = {}
    for op, arg, _ in pickletools.genops(payload):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING"):
            strings.append(arg)
        elif op.name == "MEMOIZE":
            memo[len(memo)] = strings[-1] if strings else None
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            strings.append(memo.get(arg if isinstance(arg, int) else -1))
        elif op.name == "GLOBAL":
            modules.add(str(arg).split(" ")[0].split(".")[0])
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2 and isinstance(strings[-2], str):
            modules.add(strings[-2].split(".")[0])
    return modules


def _probe_fn(kind: str, payload: Any, sys_path: list[str]) -> str | None:
    """Runs on a node: can this function be loaded here, with the import path a worker gets (the
    driver's)? None, or what is missing. Nothing is imported (a module that imports TensorFlow
    would stay in a pooled Ray worker)."""
    import importlib.util

    added = [p for p in sys_path if p not in sys.path]
    sys.path[:0] = added
    importlib.invalidate_caches()
    try:
        if kind == "module":
            module = str(payload).partition(":")[0]
            if importlib.util.find_spec(module) is None:
                return f"no module named {module!r}"
        elif kind == "file":
            path = str(payload).rpartition(":")[0]
            if not os.path.isfile(path):
                return f"no file {path}"
        elif kind == "pickle":
            for module in sorted(_pickled_modules(payload)):
                if importlib.util.find_spec(module) is None:
                    return f"it needs the module {module!r}, which is not installed there"
    except Exception as err:  # noqa: BLE001 - reported, not raised
        return f"{type(err).__name__}: {err}"
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)
    return None
