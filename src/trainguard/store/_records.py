"""Records read back from the store. Frozen, slotted, units in field names; JSON columns decoded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard._outcome import TrialOutcome
from trainguard.outcomes import Failure

__all__ = [
    "RunInfo",
    "RunSummary",
    "TrialRecord",
    "AttemptRecord",
    "WorkerRecord",
    "EventRecord",
    "Sample",
    "FittedSize",
    "StageRecord",
    "SessionSettings",
    "BytesInUseReading",
]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run: a named list of trials of one function.

    ``resumed`` is True when :meth:`Store.begin_run` found the run already stored with the same
    params and returned it; ``sessions`` counts the ``begin_run`` calls that opened it.
    """

    run_id: int
    name: str
    fn_ref: str
    status: str
    config: dict[str, Any]
    trial_count: int
    created_at: float
    updated_at: float
    finished_at: float | None
    sessions: int = 1
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One line of ``trainguard runs``: counts, times and the highest memory seen."""

    run_id: int
    name: str
    fn_ref: str
    status: str
    trials_total: int
    trials_ok: int
    trials_failed: int
    trials_pending: int
    created_at: float
    updated_at: float
    finished_at: float | None
    duration_s: float
    #: the highest of the trials' peaks and of the sampled worker-tree RSS; None when nothing was measured
    peak_rss_bytes: int | None
    workers_started: int
    sessions: int


@dataclass(frozen=True, slots=True)
class TrialRecord(TrialOutcome):
    """One trial. ``status`` is ``"pending"`` until :meth:`Store.finish_trial` makes it ``"ok"``/``"failed"``."""

    run_id: int
    finished_at: float | None
    #: the seed the trial ran with (``Runner(seed=...)``), None for an unseeded run
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One try of a trial in a worker. ``status`` is ``"running"`` until finished (or ``"interrupted"``
    when the supervisor stopped before recording its end)."""

    run_id: int
    index: int
    attempt: int
    worker_id: int
    status: str
    error: Failure | None
    peak_rss_bytes: int | None
    duration_s: float | None
    started_at: float
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One worker process. ``reason`` is None while it runs; see :data:`WORKER_REASONS` for the words."""

    run_id: int
    worker_id: int
    pid: int
    config: dict[str, Any]
    started_at: float
    ended_at: float | None
    reason: str | None
    detail: dict[str, Any] | None

    @property
    def reason_text(self) -> str:
        """Why the worker ended, in words."""
        from trainguard.store._schema import describe_worker_end

        return describe_worker_end(self.reason, self.detail)


@dataclass(frozen=True, slots=True)
class EventRecord:
    event_id: int
    run_id: int
    time: float
    kind: str
    message: str
    data: dict[str, Any] | None
    worker_id: int | None
    index: int | None


@dataclass(frozen=True, slots=True)
class Sample:
    """One stored memory sample: the highest reading of its time bucket (see :meth:`Store.add_samples`)."""

    time: float
    worker_id: int
    rss_bytes: int
    uss_bytes: int | None
    gpu_bytes: int | None


@dataclass(frozen=True, slots=True)
class FittedSize:
    """An integer parameter (a batch size) that fitted a trial function on a device under its limits.

    ``params_key`` is the canonical JSON of the trial's params without the shrunk key (and its
    accumulation key); ``device`` names the host, visible GPUs and limits; ``source`` is
    ``"shrink"`` (out-of-memory recovery) or ``"fit"`` (``find_batch_size``).
    """

    fn_ref: str
    params_key: str
    device: str
    key: str
    size: int
    peak_rss_bytes: int | None
    source: str
    detail: dict[str, Any] | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One entry of a staged trial's history: ``event`` is ``"checkpoint"`` (stage ``stage``
    committed by worker ``worker_id``, with the tree's RSS then and its peak during the stage),
    ``"resume"`` (a worker resumed from stage ``stage``) or ``"restart"`` (it started over; ``note``
    says why, such as a deleted checkpoint)."""

    run_id: int
    index: int
    attempt: int
    stage: int
    worker_id: int | None
    time: float
    rss_bytes: int | None
    peak_rss_bytes: int | None
    event: str
    note: str | None


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The settings one session of a run ran with (session 1 started it, each resume adds one):
    the Runner's config as ``begin_run`` received it. A trial ran with the settings of the session
    its last attempt started in."""

    run_id: int
    session: int
    config: dict[str, Any]
    started_at: float


@dataclass(frozen=True, slots=True)
class BytesInUseReading:
    """The C allocator's bytes in use in a worker right after one attempt ended (after the
    worker's cleanup and a ``gc.collect()``): ``allocator`` names whose count it is (``"glibc"``,
    ``"jemalloc"``, ``"tcmalloc"``). Only the worker process's own: its children are not in it."""

    run_id: int
    index: int
    attempt: int
    worker_id: int
    allocator: str
    bytes_in_use: int
    time: float
