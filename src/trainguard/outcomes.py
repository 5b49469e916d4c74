"""The words for outcomes, in one place: how an attempt ended, why a worker ended, what a run's
events are, and the frozen record of one failure.

The policy (which failures are retried), the store's schema (what it accepts), ``trainguard show``
and the HTML report all read these enums, so a status added here has its words, its retry family
and its place in every view at once. Each member *is* its stored string (``str`` enums): the store
keeps plain words, and a row read back compares equal to its member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

__all__ = [
    "AttemptStatus",
    "WorkerReason",
    "EventKind",
    "Failure",
    "ATTEMPT_STATUSES",
    "OOM_STATUSES",
    "RETRY_CATEGORIES",
    "ATTEMPT_WORDS",
    "WORKER_REASONS",
    "RECYCLE_CAUSES",
]


class AttemptStatus(str, Enum):
    """How one attempt of a trial ended, with its words and the ``retry_on`` family it belongs to.

    ``retry_category`` is None for outcomes that are never retried (success, a checkpoint left on
    purpose, a deterministic failure); ``out_of_memory`` marks the statuses OOM recovery answers;
    ``by_store`` marks the two the store writes itself (never passed to ``finish_attempt``).
    """

    words: str
    retry_category: str | None
    out_of_memory: bool
    by_store: bool

    def __new__(
        cls,
        value: str,
        words: str,
        retry_category: str | None,
        out_of_memory: bool = False,
        by_store: bool = False,
    ) -> AttemptStatus:
        member = str.__new__(cls, value)
        member._value_ = value
        member.words = words
        member.retry_category = retry_category
        member.out_of_memory = out_of_memory
        member.by_store = by_store
        return member

    def __str__(self) -> str:
        return str(self.value)

    OK = ("ok", "ok", None)
    # a staged trial's worker stopped at a checkpoint to shed memory: the trial goes on
    STAGED = ("staged", "left at a checkpoint; the next attempt resumes from it", None)
    EXCEPTION = ("exception", "raised an exception", "exception")
    FRAMEWORK_OOM = ("framework_oom", "out of memory in the framework", "memory", True)
    CRASHED = ("crashed", "crashed", "crash")
    OS_OOM = ("os_oom", "killed by the OS out-of-memory killer", "memory", True)
    KILLED_MEMORY = ("killed_memory", "killed at the memory limit", "memory", True)
    KILLED_GPU_MEMORY = ("killed_gpu_memory", "killed at the GPU memory limit", "memory", True)
    # the workers' trees together crossed Runner(memory_budget=...): the pool's doing when others
    # ran beside it (run again at lower concurrency without using ``retries``)
    KILLED_BUDGET = (
        "killed_budget",
        "killed at the run's memory budget (the workers together over it)",
        "memory",
    )
    TIMEOUT = ("timeout", "killed at the trial timeout", "timeout")
    # a result that cannot be serialized, or is over the cap, fails the same way every time
    NOT_SERIALIZABLE = ("not_serializable", "result not JSON-serializable", None)
    RESULT_TOO_LARGE = ("result_too_large", "result over the size cap (max_result_bytes)", None)
    # the trial wrote onto its worker's message channel: deterministic, never retried
    PROTOCOL_ERROR = ("protocol_error", "wrote outside the worker's message protocol", None)
    # the peak model's interval for the trial lay wholly over memory_limit: never started
    PREDICTED_OVER_LIMIT = (
        "predicted_over_limit",
        "not started: its predicted peak is over the memory limit",
        None,
    )
    # the disk under its checkpoints filled up: the run stopped, the trial stays pending and a
    # resume runs it again from its last committed checkpoint (never a retry: no retry is used)
    DISK_FULL = ("disk_full", "stopped: the disk of its checkpoints filled up", None)
    RUNNING = ("running", "running", None, False, True)
    INTERRUPTED = (
        "interrupted",
        "interrupted: its supervisor stopped before the attempt ended",
        None,
        False,
        True,
    )


class WorkerReason(str, Enum):
    """Why a worker ended (``Store.end_worker(reason=...)``), with the words ``show`` prints."""

    words: str

    def __new__(cls, value: str, words: str) -> WorkerReason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.words = words
        return member

    def __str__(self) -> str:
        return str(self.value)

    RECYCLED = ("recycled", "recycled by policy")
    KILLED_MEMORY = ("killed_memory", "killed at the memory limit")
    KILLED_GPU_MEMORY = ("killed_gpu_memory", "killed at the GPU memory limit")
    KILLED_TIMEOUT = ("killed_timeout", "killed at the trial timeout")
    KILLED_BUDGET = ("killed_budget", "killed at the run's memory budget")
    OS_OOM = ("os_oom", "killed by the OS out-of-memory killer")
    CRASHED = ("crashed", "crashed")
    EXITED = ("exited", "exited on its own")
    PROTOCOL_ERROR = ("protocol_error", "ended: it sent a message outside the protocol")
    SHUTDOWN = ("shutdown", "shut down at the end of the run")
    # the Ray backend: the node (or the actor) that ran the worker is gone
    NODE_LOST = ("node_lost", "lost with its Ray node or actor")
    # the Slurm backend: the pilot job that ran the worker ended (scancel, preemption, time limit)
    PILOT_LOST = ("pilot_lost", "lost with its Slurm pilot job")
    # written by the store itself when a run is resumed and a worker of an earlier session was
    # never closed: its supervisor was killed
    INTERRUPTED = ("interrupted", "lost: its supervisor stopped before recording why it ended")

    @property
    def is_kill(self) -> bool:
        """The worker was ended from outside (a limit, the OS, a crash), not recycled or shut down."""
        return self in _KILL_REASONS


#: Why a recycled worker grew, where a memory rule named it (its detail's ``cause``): the words.
RECYCLE_CAUSES: dict[str, str] = {
    "leak": "for a leak (its allocator's bytes in use grew with its RSS)",
    "retention": "for retention (its allocator keeps freed memory: RSS grew, bytes in use did not)",
}

_KILL_REASONS = frozenset(
    {
        WorkerReason.KILLED_MEMORY,
        WorkerReason.KILLED_GPU_MEMORY,
        WorkerReason.KILLED_BUDGET,
        WorkerReason.KILLED_TIMEOUT,
        WorkerReason.OS_OOM,
        WorkerReason.CRASHED,
    }
)


class EventKind(str, Enum):
    """The kinds of a run's events (``Store.add_event(kind=...)``), each in the view that lists it:
    ``"pool"`` (the pool's shape: ``show``'s workers/threads/budget table), ``"memory"`` (per-trial
    memory figures and OOM recovery), ``"pressure"`` (memory pressure under a soft limit: its own
    section), ``"run"`` (everything else, the run's log)."""

    view: str

    def __new__(cls, value: str, view: str) -> EventKind:
        member = str.__new__(cls, value)
        member._value_ = value
        member.view = view
        return member

    def __str__(self) -> str:
        return str(self.value)

    WORKERS = ("workers", "pool")
    THREADS = ("threads", "pool")
    PRESTART = ("prestart", "pool")
    BUDGET_WAIT = ("budget_wait", "pool")
    BUDGET_KILL = ("budget_kill", "pool")
    BUDGET_EXCEEDED = ("budget_exceeded", "pool")
    BUDGET_TOO_SMALL = ("budget_too_small", "pool")
    TRIAL_STATS = ("trial_stats", "memory")
    OOM_SHRINK = ("oom_shrink", "memory")
    OOM_START = ("oom_start", "memory")
    OOM_FITTED = ("oom_fitted", "memory")
    OOM_GIVE_UP = ("oom_give_up", "memory")
    #: files a trial left in tmpfs (/dev/shm), removed at its end (their memory outlives it)
    TMPFS_REMOVED = ("tmpfs_removed", "memory")
    # the peak model (Policy(predict_peaks=True)): fitted, a trial not started or started smaller
    # because of it, and a kill it did not see coming
    PEAK_MODEL = ("peak_model", "memory")
    PEAK_SKIP = ("peak_skip", "memory")
    PEAK_START = ("peak_start", "memory")
    PEAK_WRONG = ("peak_wrong", "memory")
    RECYCLE = ("recycle", "run")
    # malloc_trim(0) in a worker a retention would recycle, and what it gave back
    TRIM = ("trim", "run")
    KILL = ("kill", "run")
    RETRY = ("retry", "run")
    # a trial lost with its cluster job (a Slurm pilot) runs again without using retries
    RERUN = ("rerun", "run")
    STAGE_EXIT = ("stage_exit", "run")
    STAGE_RESTART = ("stage_restart", "run")
    ENVIRONMENT = ("environment", "run")
    MEMORY_ACCOUNTING = ("memory_accounting", "run")
    FN_REF = ("fn_ref", "run")
    FUNCTION_CHANGED = ("function_changed", "run")
    REUSED = ("reused", "run")
    RUN_FINISHED = ("run_finished", "run")
    RUN_REPLACED = ("run_replaced", "run")
    #: how a memory pressure (soft limit) ended: what the trial did, what it cost (its own section in show)
    PRESSURE = ("pressure", "pressure")

    @classmethod
    def in_view(cls, view: str) -> tuple[str, ...]:
        """The kinds (as stored words) that ``view`` lists, in declaration order."""
        return tuple(k.value for k in cls if k.view == view)


#: The statuses the supervisor records (``Store.finish_attempt`` accepts exactly these).
ATTEMPT_STATUSES: tuple[str, ...] = tuple(s.value for s in AttemptStatus if not s.by_store)
#: Attempt statuses that mean "out of memory", whatever noticed it.
OOM_STATUSES: tuple[str, ...] = tuple(s.value for s in AttemptStatus if s.out_of_memory)
#: Families of failures that ``retry_on`` names.
RETRY_CATEGORIES = ("crash", "memory", "timeout", "exception")
#: Every attempt status (those the store writes too) in words.
ATTEMPT_WORDS: Mapping[str, str] = {s.value: s.words for s in AttemptStatus}
#: Why a worker ended, in words (the store validates ``end_worker(reason=...)`` against the keys).
WORKER_REASONS: dict[str, str] = {r.value: r.words for r in WorkerReason}


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one attempt failed, as it crosses from the worker (or the supervisor's view of its end)
    into the store: ``status`` (an :class:`AttemptStatus`), ``message`` and whatever numbers the
    cause carries (``type`` and ``traceback`` for an exception, ``limit_bytes``, ``signal``,
    ``attempt``, ``worker_id``, ``ran_with``, ...), kept exactly as stored.

    A changed view of a failure is a new record (:meth:`with_fields`, :meth:`with_message`), never an
    edit in place: the attempt's row keeps what it was written with while the trial's row may say
    more (an OOM give-up adds why no smaller size was tried).
    """

    fields: Mapping[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))

    @property
    def status(self) -> str:
        return str(self.fields.get("status") or "")

    @property
    def message(self) -> str:
        return str(self.fields.get("message") or "")

    def with_fields(self, **more: Any) -> Failure:
        return Failure({**self.fields, **more})

    def with_message(self, message: str) -> Failure:
        return self.with_fields(message=message)

    def to_json(self) -> dict[str, Any]:
        """The dict the store keeps (the same keys, in the same order, as it was given)."""
        return dict(self.fields)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Failure | None:
        return None if data is None else cls(data)
