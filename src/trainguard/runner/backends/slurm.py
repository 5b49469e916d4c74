"""The Slurm backend: the same supervised workers, inside pilot jobs on a Slurm cluster.

Shape. The driver (this process) keeps the session: queue, policy, retries, the store (its only
writer). It submits a few pilot jobs with submitit (``slurm={...}`` is passed through as submitit's
``slurm_*`` options), never one job per trial. Each pilot
(:class:`~trainguard.runner.backends.slurm_pilot.Pilot`) connects back over TCP, authenticated with a
random per-run token (``multiprocessing.connection``'s HMAC challenge), and hosts up to
``workers_per_pilot`` workers with the Ray backend's slot agent: the local backend's worker code,
sampled, limited, killed and ended on the node. On the driver a worker is a :class:`SlurmWorker`,
the remote handle the Ray backend's workers have too
(:class:`~trainguard.runner.backends._remote_agent.RemoteWorker`: inbox pipe, peaks that survive the
trip, kills made next to the worker) talking to its pilot instead of an actor; a pilot's events reach
the handles through the same dispatch (:class:`~trainguard.runner.backends._remote_agent.AgentLink`).

A pilot that ends (scancel, preemption, its time limit, a failed node, Slurm's cgroup OOM) ends
its workers' handles with Slurm's cause in words (``scontrol``'s job state); their trials run
again on another pilot without using ``retries`` (a replacement pilot is submitted when a worker
has nowhere to start). Slurm's pre-timeout signal marks a pilot as ending: nothing new starts there
and its staged trials leave at their next checkpoint. Pilots are named after the run, so a driver
that was killed and restarted cancels the pilots it no longer knows before it submits its own;
when the session ends every pilot is told to stop and whatever is still queued is cancelled.

submitit is imported only here, and only when a Slurm backend is used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import logging
import os
import queue
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainguard.exceptions import ConfigError, WorkerCrashedError, missing
from trainguard.runner.backends import slurm_rules
from trainguard.runner.backends._remote_agent import END_REPORT_S, AgentLink, RemoteWorker
from trainguard.runner.backends.base import BaseBackend, BaseWorker, WorkerSpec
from trainguard.runner.backends.slurm_folder import make_private, make_session_folder, prepare_root
from trainguard.runner.backends.slurm_listen import MAX_HANDSHAKES, PilotDoor, bind_listener
from trainguard.runner.backends.slurm_wire import ProtocolError, encode, fn_digest, receive, spec_to_wire
from trainguard.runner.policy import EndCause, KillDecision, Policy

__all__ = ["SlurmPilotBackend", "SlurmWorker"]

logger = logging.getLogger(__name__)

#: how long a pilot may take to start a worker once asked
_START_REPLY_S = 120.0
#: how often the queue is looked at while a worker waits for a pilot
_QUEUE_POLL_S = 2.0
_FINAL_STATES_WAIT_S = 10.0
#: exit statuses of a worker ended by a signal Slurm sends a job (SIGTERM, then SIGKILL)
_SIGNAL_DEATHS = (-15, -9, 137, 143)
#: what a pilot may send, first message (hello) apart
_FROM_PILOT = frozenset({"started", "start_failed", "events", "ending"})


def _import_submitit() -> Any:
    if importlib.util.find_spec("submitit") is None:
        raise missing(
            "submitit", "the Slurm backend (Runner(backend='slurm'), trainguard run --backend slurm)", "slurm"
        )
    import submitit

    return submitit


def _slurm_cmd(args: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields for a job (empty when Slurm no longer knows it)."""
    try:
        done = _slurm_cmd(["scontrol", "show", "job", "-o", str(job_id)], 15.0)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return slurm_rules.parse_scontrol(done.stdout) if done.returncode == 0 else {}


def queued_jobs(name: str) -> list[str]:
    """The ids of this user's jobs named ``name`` still in the queue (pending or running)."""
    try:
        done = _slurm_cmd(["squeue", "-h", "-u", _user(), "--name", name, "-o", "%i"], 15.0)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _user() -> str:
    import getpass

    return getpass.getuser()


class SlurmWorker(RemoteWorker):
    """The driver's handle on a worker that a pilot job runs (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, link: _PilotLink, info: dict[str, Any], index: int) -> None:
        super().__init__(spec, info)
        self._link = link
        self._index = index
        self.job_id = link.job_id

    @property
    def where(self) -> dict[str, Any]:
        return {"backend": "slurm", "host": self.host, "slurm_job": self.job_id}

    @property
    def ending(self) -> str | None:
        """Why the worker's pilot is about to end (its pre-timeout signal came), else None."""
        return self._link.ending

    def send(self, msg: dict[str, Any]) -> None:
        if self._exited.is_set():
            raise OSError(f"worker {self.worker_id} has ended")
        if msg.get("op") == "fn" and msg.get("kind") == "pickle":
            # the pilot has the function from its private pickle: only its digest travels
            msg = {**msg, "payload": fn_digest(msg["payload"])}
        self._link.send({"op": "send", "worker_id": self.worker_id, "msg": msg})

    def kill(self) -> None:
        if not self._exited.is_set():
            with contextlib.suppress(OSError):
                self._link.send({"op": "kill", "worker_id": self.worker_id})

    def end(self, grace_s: float) -> tuple[int | None, bool]:
        ended = super().end(grace_s)
        self._link.release(self.worker_id, self._index)
        return ended

    def _unreported(self) -> None:
        # the pilot stopped answering: its loss ends every worker it ran, this one included
        self._link.backend._lose_link(
            self._link, f"did not report the worker's end {END_REPORT_S:g} s after it was killed"
        )
        super()._unreported()  # the pilot was already lost: this worker ends all the same

    def _pilot_cause(self) -> EndCause | None:
        """The pilot's end, when the worker died of a signal while Slurm was ending its job."""
        if self._link.end is not None:
            return self._link.end
        info = job_info(self.job_id)
        state = info.get("JobState")
        if state == "COMPLETING" or self._link.terminating:
            # the job is being ended: its final state (CANCELLED, TIMEOUT...) comes with the link's end
            if self._link.lost.wait(_FINAL_STATES_WAIT_S + 5.0) and self._link.end is not None:
                return self._link.end
        if (state and state not in ("RUNNING", "CONFIGURING", "SUSPENDED")) or self._link.terminating:
            return slurm_rules.pilot_end(
                self.job_id, state, self.host or info.get("NodeList"), info.get("Reason")
            )
        return None

    def classify(self, returncode: int | None, *, in_trial: bool, kill: KillDecision | None) -> EndCause:
        end = self._link.end if self._lost is not None else None
        if end is None and kill is None and returncode in _SIGNAL_DEATHS:
            end = self._pilot_cause()  # Slurm's signal to the job reached the worker first
        if end is not None:
            detail = {**end.detail}
            return EndCause(end.attempt_status if in_trial else None, end.worker_reason, detail, end.message)
        cause = super().classify(returncode, in_trial=in_trial, kill=kill)
        if kill is None and cause.worker_reason == "crashed" and returncode in (-9, 137):
            line = slurm_rules.slurm_oom_line(self._link.log_tail())
            if line is not None:  # Slurm's cgroup killed the worker, the pilot lived on
                detail = {**cause.detail, "slurm_job": self.job_id, "why": line}
                message = f"killed by Slurm's cgroup out-of-memory handler on node {self.host} ({line})"
                return EndCause("os_oom" if in_trial else None, "os_oom", detail, message)
        cause.detail.setdefault("slurm_job", self.job_id)
        return cause


class _PilotLink(AgentLink):
    """The driver's side of one pilot job: its connection, its reader thread, its workers."""

    def __init__(self, backend: SlurmPilotBackend, index: int, job: Any) -> None:
        super().__init__()
        self.backend = backend
        self.index = index
        self.job = job
        self.job_id = str(job.job_id)
        self.conn: Any = None
        self.hello: dict[str, Any] | None = None
        self.host = ""
        self.free = list(range(backend.options.workers_per_pilot))
        self.replies: dict[int, queue.Queue[tuple[str, Any]]] = {}
        self.send_lock = threading.Lock()
        self.dead: str | None = None
        self.end: EndCause | None = None
        self.ending: str | None = None
        #: Slurm sent the job SIGTERM: it is being cancelled, preempted or timed out
        self.terminating = False
        #: set once the pilot's end is known (:attr:`end`)
        self.lost = threading.Event()
        self.thread: threading.Thread | None = None

    @property
    def usable(self) -> bool:
        return self.dead is None and self.ending is None

    def attach(self, conn: Any, hello: dict[str, Any]) -> None:
        self.conn, self.hello = conn, hello
        self.host = str(hello.get("host") or "")
        self.thread = threading.Thread(target=self._read, name=f"trainguard-pilot-{self.job_id}", daemon=True)
        self.thread.start()

    def send(self, msg: dict[str, Any]) -> None:
        if self.dead is not None or self.conn is None:
            raise OSError(f"Slurm pilot job {self.job_id} is gone")
        data = encode(msg)
        with self.send_lock:
            try:
                self.conn.send_bytes(data)
            except (OSError, ValueError) as err:
                raise OSError(f"Slurm pilot job {self.job_id}: {err}") from err

    def release(self, worker_id: int, index: int) -> None:
        with self.lock:
            self.workers.pop(worker_id, None)
            if index not in self.free:
                self.free.append(index)
        self.backend._changed()

    def log_tail(self, limit: int = 1 << 16) -> str:
        """The end of the pilot's output files (stderr then stdout): Slurm writes its own lines there."""
        out = []
        for attr in ("stderr", "stdout"):
            try:
                path = Path(getattr(self.job.paths, attr))
                with open(path, "rb") as handle:
                    handle.seek(max(0, path.stat().st_size - limit))
                    out.append(handle.read().decode("utf-8", "replace"))
            except (OSError, AttributeError, ValueError):
                continue
        return "\n".join(out)

    def _read(self) -> None:
        while True:
            try:
                message = receive(self.conn, _FROM_PILOT)
            except ProtocolError as err:
                self.backend._lose_link(self, f"sent something that is not a message of the wire ({err})")
                return
            except (EOFError, OSError, ValueError):
                self.backend._lose_link(self, None)
                return
            kind = message["op"]
            if kind in ("started", "start_failed"):
                reply = self.replies.get(message["worker_id"])
                if reply is not None:
                    reply.put((kind, message["info"] if kind == "started" else message["message"]))
            elif kind == "events":
                self.dispatch(message["events"])
            elif kind == "ending":
                self.ending = message["why"]
                self.terminating = self.terminating or message["terminating"]
                logger.warning("Slurm pilot job %s on %s: %s", self.job_id, self.host, self.ending)
                self.backend._on_ending(self)


class SlurmPilotBackend(PilotDoor, BaseBackend):
    """Workers in pilot jobs on a Slurm cluster: the running backend a
    :class:`~trainguard.runner.backends.typed.SlurmBackend` builds (``Runner(backend=SlurmBackend(...))``).

    Args:
        options: the settings as one dict (``SlurmBackend.as_options()``): submitit's Slurm
            options (``partition``, ``time``, ``mem``,
            ``gres``, ``account``, ``qos``, ``cpus_per_task``, ``setup``, ...) and trainguard's own:
            ``pilots`` (jobs per run; default ``ceil(workers / workers_per_pilot)``),
            ``workers_per_pilot`` (default 1), ``gpus_per_worker`` (default 0), ``folder`` (the
            pilots' scripts and logs, on a filesystem the nodes share; default ``trainguard-slurm``),
            ``queue_timeout`` (how long a worker may wait for a pilot to start; default ``1h``),
            ``driver_host`` (the address pilots connect to; default this host's name).
    """

    name = "slurm"

    def __init__(self, options: Any = None) -> None:
        self.options: slurm_rules.SlurmOptions = slurm_rules.parse_slurm_options(options)
        #: each worker's threads: the pilot's CPUs shared by its workers
        self.threads = self.options.threads_per_worker()
        self._raw = options
        self._run_name: str | None = None
        #: the run's owner key: its store and name (pilots are never found by a name alone)
        self._run_key = slurm_rules.run_owner_key(None, None)
        self._root: Path | None = None
        self._session_folder: Path | None = None
        self._address: tuple[str, int] | None = None
        self._handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._fn: tuple[str, Any] | None = None
        self._links: list[_PilotLink] = []
        self._cond = threading.Condition()
        self._listener: Any = None
        self._token = b""
        self._accept_thread: threading.Thread | None = None
        self._executor: Any = None
        self._policy: Policy | None = None
        self._interval_s = 0.1
        self._uss = False
        self._slots = 1
        self._closing = False
        self._problem: BaseException | None = None
        self.cancelled_orphans: list[str] = []

    # -- before the session -----------------------------------------------------------------------

    def bind_run(self, name: str, store: Any = None) -> None:
        """The run this backend serves: its pilots are named after it and its store (``store``:
        the Store, or its path), so a run of the same name in another store never takes them."""
        self._run_name = name
        path = getattr(store, "_path", store)
        self._run_key = slurm_rules.run_owner_key(None if path is None else os.fspath(path), name)

    def _job_name(self) -> str:
        return slurm_rules.job_name_for(self._run_name, self._run_key)

    def check(self, *, fn: Any, policy: Policy, slots: int, data: Any = None) -> None:
        if data is not None:
            raise ConfigError(
                "data= (arrays shared through /dev/shm) cannot be shipped to Slurm nodes: load the data "
                "inside the trial function, or use backend='local'"
            )
        if fn is not None and fn.kind in ("module", "file", "pickle"):
            self._fn = (fn.kind, fn.payload)
        if shutil.which("sbatch") is None or shutil.which("squeue") is None:
            raise ConfigError(
                "backend='slurm' needs Slurm, and there is no sbatch/squeue on PATH here: run on a "
                "cluster's login node, start a one-node Slurm (bash scripts/slurm-local.sh start), or "
                "use backend='local'"
            )
        submitit = _import_submitit()
        from submitit.slurm.slurm import _make_sbatch_string

        known = frozenset(inspect.signature(_make_sbatch_string).parameters) - {"command", "folder"}
        self.options = slurm_rules.parse_slurm_options(self._raw, known)
        self._root = prepare_root(self.options.folder)
        self._driver_ip()
        self._test_submit(submitit)

    def _sbatch_params(self) -> dict[str, Any]:
        return {**self.options.submitit, "job_name": self._job_name()}

    def _test_submit(self, submitit: Any) -> None:
        """``sbatch --test-only`` on the very script submitit will submit: Slurm's own reason,
        before any trial is queued, when it refuses the options."""
        from submitit.slurm.slurm import _make_sbatch_string

        folder = self._root or Path(self.options.folder).expanduser().absolute()
        try:
            script = _make_sbatch_string(command="true", folder=str(folder / "%j"), **self._sbatch_params())
        except (TypeError, ValueError) as err:
            raise ConfigError(f"slurm options refused by submitit: {err}") from err
        try:
            done = subprocess.run(
                ["sbatch", "--test-only"],
                input=script,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ConfigError(
                f"sbatch --test-only could not run ({err}): is Slurm reachable from here?"
            ) from err
        if done.returncode != 0:
            raise ConfigError(
                f"Slurm refuses the pilot job's options: {slurm_rules.sbatch_refusal(done.stderr)}; "
                "fix slurm={...} (--slurm KEY=VALUE): e.g. a partition sinfo lists, a time under its limit"
            )

    # -- the session ------------------------------------------------------------------------------

    def open(self, *, slots: int, policy: Policy, sample_interval_s: float = 0.1, uss: bool = False) -> None:
        submitit = _import_submitit()
        self._policy, self._interval_s, self._uss, self._slots = policy, sample_interval_s, uss, slots
        self._closing = False
        self._cancel_orphans()
        self._token = secrets.token_bytes(32)
        self._listener = bind_listener(self._driver_ip())
        self._address = self._listener.getsockname()[:2]
        root = self._root or prepare_root(self.options.folder)
        self._session_folder = make_session_folder(root, self._job_name())
        # the node checks the job's folder and pickle are private before submitit unpickles it
        python = f"{shlex.quote(sys.executable)} -u -m trainguard.runner.backends.slurm_pilot"
        self._executor = submitit.SlurmExecutor(folder=str(self._session_folder / "%j"), python=python)
        self._executor.update_parameters(**self._sbatch_params())
        self._accept_thread = threading.Thread(
            target=self._accept, name="trainguard-slurm-accept", daemon=True
        )
        self._accept_thread.start()
        for _ in range(self.options.pilot_count(slots)):
            self._submit_pilot()

    def _cancel_orphans(self) -> None:
        """Pilots of this run left in the queue by a driver that was killed: this driver does not
        know them (they serve a dead connection), so they are cancelled before new ones start."""
        name = self._job_name()
        orphans = queued_jobs(name)
        if orphans:
            _slurm_cmd(["scancel", *orphans])
            logger.warning(
                "cancelled %d Slurm pilot job(s) of run %s left by an earlier driver: %s",
                len(orphans),
                self._run_name,
                ", ".join(orphans),
            )
            self.cancelled_orphans.extend(orphans)

    def _submit_pilot(self) -> _PilotLink:
        from trainguard.runner.backends.slurm_pilot import Pilot

        index = len(self._links)
        assert self._address is not None
        pilot = Pilot(
            address=self._address,
            token=self._token,
            pilot=index,
            slots=self.options.workers_per_pilot,
            gpus_per_worker=self.options.gpus_per_worker,
            policy=self._policy or Policy(),
            interval_s=self._interval_s,
            uss=self._uss,
            only_slot=self._slots == 1,
            fn=self._fn,
            sys_path=[p for p in sys.path if p],
        )
        try:
            job = self._executor.submit(pilot)
        except Exception as err:  # noqa: BLE001 - submitit raises its own error with sbatch's output
            raise ConfigError(f"sbatch refused a pilot job: {slurm_rules.sbatch_refusal(str(err))}") from err
        if self._session_folder is not None:
            make_private(self._session_folder)  # submitit writes with the process's umask
        link = _PilotLink(self, index, job)
        with self._cond:
            self._links.append(link)
        logger.info("submitted Slurm pilot job %s (%d workers)", link.job_id, self.options.workers_per_pilot)
        return link

    def _driver_ip(self) -> str:
        """The address pilots connect to, and the only one the driver listens on: ``driver_host``'s,
        else this host name's.

        Raises:
            ConfigError: it does not resolve, or is not an address of this machine.
        """
        host = self.options.driver_host or socket.gethostname()
        try:
            ip = socket.gethostbyname(host)
            if not self.options.driver_host and ip.startswith("127."):
                ip = _route_to_ctld() or ip  # a login node whose name is its loopback (127.0.1.1)
            bind_listener(ip).close()
        except OSError as err:
            raise ConfigError(
                f"slurm driver_host={host!r} cannot be listened on here ({err.strerror or err}): give "
                "this machine's name or address that the compute nodes reach, such as driver_host=10.0.0.5"
            ) from None
        return ip

    def start(self, spec: WorkerSpec) -> BaseWorker:
        deadline = time.monotonic() + self.options.queue_timeout_s
        overrides = {k: v for k, v in spec.env.items() if os.environ.get(k) != v}
        next_look = time.monotonic() + _QUEUE_POLL_S
        while True:
            if self._problem is not None:
                raise self._problem
            link, index = self._take_slot()
            if link is not None:
                worker = self._start_on(link, index, spec, overrides)
                if worker is not None:
                    return worker
                continue
            if time.monotonic() > deadline:
                raise WorkerCrashedError(
                    f"no Slurm pilot could take worker {spec.worker_id} within "
                    f"{self.options.queue_timeout_s:g} s ({self._queue_words()}): raise slurm queue_timeout= "
                    "or ask for resources the cluster has free"
                )
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + _QUEUE_POLL_S
                self._look_at_queue()
            with self._cond:
                self._cond.wait(0.2)

    def _take_slot(self) -> tuple[_PilotLink | None, int]:
        """A free worker place on a connected pilot, or a replacement pilot submitted when there
        is none anywhere (not even on pilots still in the queue)."""
        with self._cond:
            for link in self._links:
                with link.lock:
                    if link.usable and link.hello is not None and link.free:
                        return link, link.free.pop(0)
            waiting = [link for link in self._links if link.usable and link.hello is None]
        if not waiting:
            self._submit_pilot()
        return None, -1

    def _start_on(
        self, link: _PilotLink, index: int, spec: WorkerSpec, overrides: dict[str, str]
    ) -> BaseWorker | None:
        reply: queue.Queue[tuple[str, Any]] = queue.Queue()
        link.replies[spec.worker_id] = reply
        try:
            link.send(
                {
                    "op": "start",
                    "worker_id": spec.worker_id,
                    "spec": spec_to_wire(spec),
                    "overrides": overrides,
                    "index": index,
                }
            )
            kind, info = reply.get(timeout=_START_REPLY_S)
        except (OSError, queue.Empty):
            return None  # the pilot is gone (its loss is being recorded); another one takes it
        finally:
            link.replies.pop(spec.worker_id, None)
        if kind == "start_failed":
            raise WorkerCrashedError(
                f"worker {spec.worker_id} could not start in Slurm pilot job {link.job_id} on {link.host}: {info}"
            )
        worker = SlurmWorker(spec, link, info, index)
        with link.lock:
            link.workers[spec.worker_id] = worker
        if link.dead is not None:
            worker._lose(link.dead)
        return worker

    def _look_at_queue(self) -> None:
        """Pilots that left the queue before they connected: their output says why (a node
        without this Python, a failing setup line)."""
        with self._cond:
            waiting = [link for link in self._links if link.dead is None and link.hello is None]
        for link in waiting:
            info = job_info(link.job_id)
            state = info.get("JobState", "")
            if state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"):
                continue
            tail = [ln for ln in link.log_tail().splitlines() if ln.strip()]
            last = tail[-1].strip() if tail else "no output"
            self._lose_link(link, None)
            if state not in ("CANCELLED", "PREEMPTED", "NODE_FAIL"):
                raise WorkerCrashedError(
                    f"Slurm pilot job {link.job_id} on node {info.get('NodeList') or '?'} ended ({state or 'gone'}) "
                    f"before it connected to the driver: {last} (its output: {link.job.paths.stderr})"
                )

    def _queue_words(self) -> str:
        with self._cond:
            ids = [link.job_id for link in self._links if link.dead is None]
        words = []
        for job_id in ids:
            info = job_info(job_id)
            words.append(f"job {job_id} {info.get('JobState', '?')} ({info.get('Reason', '?')})")
        return "; ".join(words) or "no pilot job in the queue"

    def _on_ending(self, link: _PilotLink) -> None:
        """The pilot's pre-timeout signal: a replacement starts while its workers finish."""
        if not self._closing:
            with contextlib.suppress(Exception):
                self._submit_pilot()
        self._changed()

    def _lose_link(self, link: _PilotLink, why: str | None) -> None:
        """The pilot's connection closed (or it stopped answering): say why in Slurm's words and
        end its workers' handles with that cause."""
        with link.lock:
            if link.dead is not None:
                return
            link.dead = "pending"
        state, node, reason = None, link.host or None, None
        deadline = time.monotonic() + (0.0 if self._closing else _FINAL_STATES_WAIT_S)
        while True:  # the job's final state may lag its connection by a moment
            info = job_info(link.job_id)
            state, reason = info.get("JobState"), info.get("Reason")
            node = node or info.get("NodeList") or None
            if state not in ("RUNNING", "COMPLETING", "CONFIGURING") or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        end = slurm_rules.pilot_end(link.job_id, state, node, reason if why is None else why)
        link.end = end
        link.dead = end.message
        link.lost.set()
        if not self._closing:
            logger.warning("%s", end.message)
        link.lose_all(end.message)
        if link.conn is not None:
            with contextlib.suppress(Exception):
                link.conn.close()
        self._changed()

    def _still_queued(self, ids: list[str], wait_s: float) -> list[str]:
        """Those of the pilot jobs ``ids`` still in the queue after up to ``wait_s`` for them to leave."""
        deadline = time.monotonic() + wait_s
        while ids and time.monotonic() < deadline:
            left = set(queued_jobs(self._job_name()))
            ids = [i for i in ids if i in left]
            if ids:
                time.sleep(0.5)
        return ids

    def close(self) -> None:
        """Stop every pilot (asked first, then ``scancel``), and wait until none is in the queue."""
        self._closing = True
        self._wake_accept()
        with self._cond:
            links = list(self._links)
        for link in links:
            if link.dead is None and link.conn is not None:
                with contextlib.suppress(OSError):
                    link.send({"op": "shutdown"})
        ids = self._still_queued([link.job_id for link in links], 15.0)
        if ids:
            _slurm_cmd(["scancel", *ids])
            self._still_queued(ids, 30.0)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
            self._listener = None
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5.0)
            self._accept_thread = None
        for link in links:
            if link.conn is not None:
                with contextlib.suppress(Exception):
                    link.conn.close()
        with self._cond:
            self._links = []


def _route_to_ctld() -> str | None:
    """This machine's address on the way to slurmctld (the network the nodes share with it); None
    when the controller is on loopback (a one-node Slurm) or cannot be told."""
    try:
        done = _slurm_cmd(["scontrol", "show", "config"], 15.0)
        hosts = slurm_rules.ctld_hosts(done.stdout) if done.returncode == 0 else []
        if not hosts:
            return None
        ctld = socket.gethostbyname(hosts[0])
        if ctld.startswith("127."):
            return None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((ctld, 9))  # no packet is sent: the kernel picks the route's source address
            return str(probe.getsockname()[0])
    except (OSError, subprocess.TimeoutExpired):
        return None
