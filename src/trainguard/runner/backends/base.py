"""The backend interface: where and how a supervised worker process runs.

A session (``runner/session/``) owns the run: the queue, the policy's decisions,
retries and the store (its only writer). It asks a backend for worker processes and talks to each
through a :class:`BaseWorker` handle, and nothing else; so the local backend (``backends/local.py``, workers
as child processes of the supervisor) and the Ray backend (``backends/ray.py``, each worker hosted by a Ray
actor on some node of a cluster) share the policy, the store and every decision. A third engine
(a SLURM job per slot, say) implements these two classes and touches neither.

Public as ``from trainguard.runner import BaseBackend, BaseWorker``; the contract is
:class:`BaseBackend`'s docstring.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from trainguard.runner.policy import EndCause, KillDecision, Policy, PressureDecision

if TYPE_CHECKING:
    from trainguard.process.charge import MemorySplit
    from trainguard.process.tmpfs import TmpfsFile

__all__ = ["WorkerSpec", "Inbox", "BaseWorker", "BaseBackend"]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything needed to start one worker; picklable, since a remote backend ships it."""

    worker_id: int
    slot: int
    #: the worker's whole environment (the runner's base environment and the slot's devices)
    env: dict[str, str]
    #: what the worker bootstrap reads (``WORKER_CONFIG_ENV``), less what the starter fills in:
    #: ``parent_pid``, ``capture_dir`` and ``cgroup``
    bootstrap: dict[str, Any]
    #: "python" (``python -m trainguard.runner.worker.process``) or "node" (the JavaScript worker)
    fn_kind: str
    max_message_bytes: int
    tree_tracking: str = "auto"
    #: the policy's hard memory limit, for a tier whose OS enforces one (a Windows Job Object)
    memory_limit_bytes: int | None = None
    #: where a worker started by this process keeps TensorFlow's captured start-up output
    capture_dir: str | None = None
    #: store-side detail recorded with the worker (its slot's devices)
    detail: dict[str, Any] = field(default_factory=dict)


class Inbox(Protocol):
    """What the session's loop waits on and reads (see the module docstring)."""

    def fileno(self) -> int: ...

    def read(self) -> list[dict[str, Any]]: ...


class BaseWorker(ABC):
    """One worker process, wherever it runs. Every method is called from the session's loop thread,
    except :meth:`read`, :meth:`pids` and :meth:`kill`, which the sampler thread also calls."""

    worker_id: int
    slot: int
    #: the worker's process id (on its own host)
    pid: int
    #: wall-clock time the worker was started (``time.time()``)
    started_wall: float
    #: how its process tree is tracked, for the store ("cgroup+subreaper", "subreaper", ...)
    tracking: str
    #: True when limits are enforced next to the worker rather than by the session's sampler
    enforces_limits: bool = False

    @property
    @abstractmethod
    def inbox(self) -> Inbox:
        """The worker's messages to the supervisor."""

    @property
    def where(self) -> dict[str, Any]:
        """Where the worker runs (host, node), recorded with the worker; empty when local."""
        return {}

    @property
    def kill_decision(self) -> KillDecision | None:
        """A limit kill made next to the worker (only when :attr:`enforces_limits`)."""
        return None

    @abstractmethod
    def send(self, msg: dict[str, Any]) -> None:
        """Deliver one supervisor message; ``OSError`` when the worker is gone.

        Args:
            msg: the message, JSON-ready.
        """

    @abstractmethod
    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        """One reading of the tree's memory: (RSS bytes, USS bytes or None), or None when unreadable.

        Args:
            uss: also read USS.
            rediscover: find the tree's processes again before reading.

        Returns:
            ``(rss_bytes, uss_bytes or None)``, or None.
        """

    @abstractmethod
    def pids(self) -> tuple[int, ...]:
        """The tree's processes as last found (for GPU memory by pid).

        Returns:
            The pids.
        """

    def memory_split(
        self, rss_bytes: int, *, limit_bytes: int | None, sole: bool, private: bool
    ) -> MemorySplit | None:
        """After a :meth:`read` that gave ``rss_bytes`` (sampler thread): the tree's memory by kind
        and what it holds in tmpfs, where that could change the limit's decision or the figure
        recorded (:func:`~trainguard.process.charge.needs_split`); None otherwise, or where this
        backend cannot read it (the RSS is then what counts). ``sole``: this worker runs the run's
        only trial now; ``private``: the RSS given is the tree's private memory (USS).

        Args:
            rss_bytes: the reading :meth:`read` gave.
            limit_bytes: the memory limit in force, or None.
            sole: this worker runs the run's only trial now.
            private: ``rss_bytes`` is the tree's private memory (USS).

        Returns:
            The split, or None.
        """
        return None

    def trial_started(self) -> None:  # noqa: B027 - optional hook
        """A trial was sent to this worker (loop thread)."""

    def trial_ended(self, *, remove: bool = True) -> tuple[TmpfsFile, ...]:
        """The running trial ended (loop thread): remove the files it left in ``/dev/shm``; return
        them. ``remove=False``: it goes on in another worker (a stage), its files stay.

        Args:
            remove: remove the trial's tmpfs files (False for a stage that goes on elsewhere).

        Returns:
            The files the trial left.
        """
        return ()

    def gpu_bytes(self, gpu_by_pid: dict[int, int] | None) -> int | None:
        """The tree's GPU memory, given this host's GPU memory by pid (None when NVML is absent);
        a backend whose worker runs on another host returns what was measured there.

        Args:
            gpu_by_pid: GPU bytes by pid on this host, or None without NVML.

        Returns:
            The tree's GPU bytes, or None when unknown.
        """
        if gpu_by_pid is None:
            return None
        return sum(gpu_by_pid.get(pid, 0) for pid in self.pids())

    @abstractmethod
    def kill(self) -> None:
        """End the worker's whole tree now (idempotent)."""

    def pressure_raised(self) -> tuple[PressureDecision, bool] | None:
        """Pressure that the verdict next to the worker raised on its trial since the last call
        (only when :attr:`enforces_limits`): the decision and whether the worker was told.

        Returns:
            ``(decision, delivered)``, or None.
        """
        return None

    def signal_pressure(self) -> bool:
        """Raise ``ctx.under_pressure`` in the worker's running trial (sampler thread); False where
        this backend cannot deliver it (the trial then runs on to its hard limit, as before).

        Returns:
            True when the signal was delivered.
        """
        return False

    def on_ready(self, msg: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """The worker's ``ready`` message arrived (its report of how its tree is tracked).

        Args:
            msg: the ``ready`` message.
        """

    @abstractmethod
    def wait(self, timeout_s: float | None) -> int | None:
        """Wait for the worker to exit: its exit status (negative: killed by that signal), or None
        when it is still running after ``timeout_s``.

        Args:
            timeout_s: the longest wait; None waits until it exits.

        Returns:
            The exit status, or None.
        """

    @abstractmethod
    def end(self, grace_s: float) -> tuple[int | None, bool]:
        """Wait up to ``grace_s`` for the worker to exit, kill its tree if it has not, end whatever
        it started that is still alive, and release the handle's resources.

        Returns:
            (exit status, whether it had to be killed after the grace period)

        Args:
            grace_s: seconds to wait for a clean exit before the kill.
        """

    @abstractmethod
    def classify(self, returncode: int | None, *, in_trial: bool, kill: KillDecision | None) -> EndCause:
        """Why the worker ended (see :func:`~trainguard.runner.policy.classify_end`).

        Args:
            returncode: the exit status (negative: the signal), or None.
            in_trial: the worker was running a trial when it ended.
            kill: the supervisor's kill decision, when it killed the worker.

        Returns:
            The cause, in words and as a status.
        """


class BaseBackend(ABC):
    """Starts workers. One backend object serves one Runner (all its sessions); pass one as
    ``Runner(backend=MyBackend())``.

    The contract, for implementers:

    - :meth:`BaseBackend.start` starts one worker process from a :class:`WorkerSpec` and returns at
      once (the worker says ``ready`` through the inbox when it has started).
    - :attr:`BaseWorker.inbox` is what the session's loop waits on: an object with ``fileno()`` (a
      file descriptor that becomes readable when there is something to read) and ``read()``, which
      returns the complete worker messages available now (parsed and checked by
      :func:`~trainguard.runner._protocol.parse_message`), raises ``EOFError`` once the worker is gone
      and nothing is left, and ``ProtocolError`` when the worker sent something that is not a message.
    - :meth:`BaseWorker.send` delivers a supervisor message (``fn``, ``trial``, ``exit``,
      ``stage_reply``) or raises ``OSError`` when the worker is gone.
    - :meth:`BaseWorker.read` is one reading of the worker's whole process tree (RSS, and USS when
      asked) from outside the worker; the session's sampler thread calls it at its interval. A backend
      whose worker runs elsewhere returns the highest reading taken there since the last call, so
      peaks survive the trip.
    - :meth:`BaseWorker.kill` ends the worker's whole tree now; :meth:`BaseWorker.wait` waits for the
      worker to be gone; :meth:`BaseWorker.end` makes sure it and everything it started are gone and
      releases what the handle holds.
    - Limits: when :attr:`BaseWorker.enforces_limits` is False the session asks the limit verdict
      (:func:`~trainguard.runner.policy.limit_verdict`: hard limits, timeout, the soft limit's
      pressure and grace) on every reading and calls :meth:`kill`; when True, something next to the
      worker does (at the same interval, with the same verdict) and reports its kill as
      :attr:`BaseWorker.kill_decision` and the pressure it raised through
      :meth:`BaseWorker.pressure_raised`.
    - :meth:`BaseWorker.classify` says why the worker ended, in words, as an
      :class:`~trainguard.runner.policy.EndCause`; a backend that knows more than the exit status
      (a lost node) says so there.
    """

    #: the name users pass as ``Runner(backend=...)``
    name: str = ""

    def check(self, *, fn: Any, policy: Policy, slots: int, data: Any = None) -> None:  # noqa: B027
        """Refuse, before any trial starts, what this backend cannot run (one-line ``ConfigError``):
        ``fn`` is the prepared :class:`~trainguard.runner._fnref.FnSpec`, ``data`` what ``map`` got.

        Args:
            fn: the prepared function spec.
            policy: the run's policy.
            slots: the most workers the run uses at once.
            data: the ``data=`` given to ``map``, or None.
        """

    def open(  # noqa: B027 - optional hook
        self, *, slots: int, policy: Policy, sample_interval_s: float = 0.1, uss: bool = False
    ) -> None:
        """A session begins: it will use at most ``slots`` workers at once, sample each every
        ``sample_interval_s`` (USS too when ``uss``) and hold them to ``policy``'s limits.

        Args:
            slots: the most workers at once.
            policy: the run's policy (its limits are enforced where the workers run).
            sample_interval_s: seconds between two readings of a worker's tree.
            uss: read USS as well as RSS (with shared data).
        """

    @abstractmethod
    def start(self, spec: WorkerSpec) -> BaseWorker:
        """Start one worker (returns without waiting for it to be ready).

        Args:
            spec: what the worker is (its id, slot, environment, function).

        Returns:
            The worker's handle.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """The session ended: release whatever the backend holds for it (idempotent)."""
