"""The words for outcomes, in one place: how an attempt ended, why a worker ended, what a run's
events are, and the frozen record of one failure.

The policy (which failures are retried), the store's schema (what it accepts), ``trainguard show``
and the HTML report all read these enums, so a status added here has its words, its retry family
and its place in every view at once. Each member *is* its stored string (``str`` enums): the store
keeps plain words, and a row read back compares equal to its member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

__all__ = [
    "AttemptStatus",
    "WorkerReason",
    "EventKind",
    "Failure",
    "plain_record",
    "ATTEMPT_STATUSES",
    "OOM_STATUSES",
    "RETRY_CATEGORIES",
    "ATTEMPT_WORDS",
    "WORKER_REASONS",
    "RECYCLE_CAUSES",
]


class _StoredWord(str, Enum):
    """A ``str`` enum whose member is its stored word (the first item of its tuple): the rest of
    the tuple goes to the subclass's ``__init__``, which keeps it as the member's attributes."""

    def __new__(cls, value: str, *attributes: Any) -> Any:
        member = str.__new__(cls, value)
        member._value_ = value
        return member

    def __str__(self) -> str:
        return str(self.value)


class AttemptStatus(_StoredWord):
    """How one attempt of a trial ended, with its words and the ``retry_on`` family it belongs to.

    ``retry_category`` is None for outcomes that are never retried (success, a checkpoint left on
    purpose, a deterministic failure); ``out_of_memory`` marks the statuses OOM recovery answers;
    ``by_store`` marks the two the store writes itself (never passed to ``finish_attempt``).
    """

    words: str
    retry_category: str | None
    out_of_memory: bool
    by_store: bool

    def __init__(
        self,
        value: str,
        words: str,
        retry_category: str | None,
        out_of_memory: bool = False,
        by_store: bool = False,
    ) -> None:
        self.words = words
        self.retry_category = retry_category
        self.out_of_memory = out_of_memory
        self.by_store = by_store

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


class WorkerReason(_StoredWord):
    """Why a worker ended (``Store.end_worker(reason=...)``), with the words ``show`` prints."""

    words: str

    def __init__(self, value: str, words: str) -> None:
        self.words = words

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


class EventKind(_StoredWord):
    """The kinds of a run's events (``Store.add_event(kind=...)``), each in the view that lists it:
    ``"pool"`` (the pool's shape: ``show``'s workers/threads/budget table), ``"memory"`` (per-trial
    memory figures and OOM recovery), ``"pressure"`` (memory pressure under a soft limit: its own
    section), ``"run"`` (everything else, the run's log)."""

    view: str

    def __init__(self, value: str, view: str) -> None:
        self.view = view

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


#: The stored key of each typed field of :class:`Failure` whose key is not its name.
_KEYS = {"exc_type": "type"}
_TEXT = ("status", "message", "exc_type", "traceback", "framework", "signal")
_WHOLE = ("exitcode", "rss_bytes", "limit_bytes", "attempt", "worker_id")
_MAPS = ("ran_with", "prediction", "flight_recorder", "disk_full")


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one attempt of a trial failed: ``TrialResult.error`` (and the store's records) for a
    trial that did not end ``ok``; None for one that did.

    ``status`` is the attempt's cause (an :class:`AttemptStatus`: ``exception``, ``framework_oom``,
    ``crashed``, ``os_oom``, ``killed_memory``, ``timeout``...) and ``message`` one line for people.
    An exception carries ``exc_type`` (its qualified name), ``mro`` (its classes, most derived
    first), ``traceback`` and, for an out-of-memory error, the ``framework`` that raised it. A worker
    that ended carries its ``exitcode`` and ``signal``; a memory kill the ``rss_bytes`` read at the
    kill and the ``limit_bytes`` it crossed. The supervisor adds the ``attempt`` and ``worker_id``,
    ``ran_with`` (the sizes an out-of-memory attempt ran with), ``prediction`` (a trial the peak
    model did not start), ``flight_recorder`` (the last seconds before a kill) and ``disk_full``
    (where the disk filled up). ``detail`` holds the other figures of a cause, which differ by
    cause and backend (``timeout_s``, ``elapsed_s``, ``gpu_bytes``, ``tmpfs_bytes``, ``host``,
    ``slurm_job``, ``why``...).

    The record crosses a process, the store or a wire as :meth:`to_dict` (the flat JSON object
    the store has always kept) and comes back with :meth:`from_dict`. A changed view is a new
    record (``dataclasses.replace``).
    """

    status: str
    message: str
    exc_type: str | None = None
    mro: tuple[str, ...] = ()
    traceback: str | None = None
    framework: str | None = None
    exitcode: int | None = None
    signal: str | None = None
    rss_bytes: int | None = None
    limit_bytes: int | None = None
    attempt: int | None = None
    worker_id: int | None = None
    ran_with: Mapping[str, Any] | None = None
    prediction: Mapping[str, Any] | None = None
    flight_recorder: Mapping[str, Any] | None = None
    disk_full: Mapping[str, Any] | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The failure as one flat JSON object (the form the store, the worker pipe and
        ``trainguard run --json`` carry): the fields set, under their stored keys, then ``detail``'s.

        Returns:
            A new dict of plain JSON values.
        """
        out: dict[str, Any] = {"status": self.status, "message": self.message}
        for f in fields(self)[2:-1]:
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            out[_KEYS.get(f.name, f.name)] = (
                list(value) if f.name == "mro" else dict(value) if f.name in _MAPS else value
            )
        for key, value in self.detail.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def of_end(cls, status: str, message: str, figures: Mapping[str, Any]) -> Failure:
        """The failure of an attempt whose worker ended: the figures of its end (an ``EndCause``'s
        ``detail``: ``exitcode``, ``signal``, ``rss_bytes``, ``limit_bytes``, ``timeout_s``...) go
        to their fields, the others to :attr:`detail`.

        Args:
            status: the attempt's status.
            message: one line for people.
            figures: the numbers behind the end.

        Returns:
            The failure.
        """
        return cls.from_dict({**figures, "status": status, "message": message})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Failure:
        """The record of a failure read back from its flat JSON object (:meth:`to_dict`'s, or the
        dict an older release stored: keys it does not name go to ``detail``).

        Args:
            data: the JSON object.

        Returns:
            The failure.

        Raises:
            StoreError: a field has the wrong type (``status`` missing or not text, a ``message``
                that is a list...); the message names the field.
        """
        if not isinstance(data, Mapping):
            raise _malformed("", f"is a {type(data).__name__}, not a JSON object")
        known = {_KEYS.get(f.name, f.name): f.name for f in fields(cls)[:-1]}
        values: dict[str, Any] = {"message": ""}
        detail: dict[str, Any] = {}
        for key, value in data.items():
            name = known.get(key)
            if name is None:
                detail[str(key)] = value
            elif value is not None:
                values[name] = _checked(name, key, value)
        if "status" not in values:
            raise _malformed("status", "is missing")
        return cls(**values, detail=detail)


def plain_record(record: Any) -> dict[str, Any]:
    """A record that holds an ``error`` (a trial's or an attempt's) as plain JSON data, its failure
    in the flat form the store keeps (:meth:`Failure.to_dict`).

    Args:
        record: a dataclass with an ``error`` field.

    Returns:
        ``dataclasses.asdict(record)`` with ``"error"`` flat (None for no failure).
    """
    out = asdict(record)
    out["error"] = None if record.error is None else record.error.to_dict()
    return out


def _checked(name: str, key: str, value: Any) -> Any:
    """A stored value of ``name``'s field, in the field's type (else the one-line error)."""
    if name in _TEXT and not isinstance(value, str):
        raise _malformed(key, f"is {type(value).__name__} {value!r:.60}, not text")
    if name in _WHOLE and (isinstance(value, bool) or not isinstance(value, int)):
        raise _malformed(key, f"is {type(value).__name__} {value!r:.60}, not a whole number")
    if name in _MAPS and not isinstance(value, Mapping):
        raise _malformed(key, f"is {type(value).__name__} {value!r:.60}, not a JSON object")
    if name == "mro":
        if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
            raise _malformed(key, f"is {value!r:.60}, not a list of class names")
        return tuple(value)
    return value


def _malformed(key: str, what: str) -> Exception:
    from trainguard.exceptions import StoreError

    where = f"its {key!r} " if key else ""
    return StoreError(
        f"a trial's stored error is malformed: {where}{what}; the store was not written by trainguard "
        "or was edited (`trainguard runs --store` lists what it holds)"
    )
