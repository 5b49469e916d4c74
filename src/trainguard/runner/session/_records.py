"""The session's records: an attempt of a trial and a worker as the pool tracks it (mutable), and
the decisions the session's parts hand the loop (:class:`Rerun`, :class:`Finish`; frozen): a part
never touches the loop's queue, it says what the loop does with the attempt.

They never leave the supervisor process (what crosses processes or goes to the store is frozen:
:class:`~trainguard.runner.backends.base.WorkerSpec`, the store's records).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

from trainguard.outcomes import Failure
from trainguard.runner.backends.base import BaseWorker
from trainguard.runner.policy import BudgetKill, KillDecision, RecycleDecision

__all__ = [
    "Attempt",
    "WorkerRecord",
    "Rerun",
    "Finish",
    "LoopAction",
    "BUDGET_KILLS_PER_TRIAL",
    "LOST_RERUNS_PER_TRIAL",
]

#: Times one trial may be killed at the memory budget beside other work and run again without using
#: ``Policy.retries`` (each kill lowers the concurrency, so this is reached only by a trial that grows
#: unlike the ones measured before it); past it, the retry policy decides.
BUDGET_KILLS_PER_TRIAL = 3
#: Times one trial runs again, in a session, after its worker was lost with its cluster job (a
#: Slurm pilot cancelled, preempted or out of time) before the retry policy decides.
LOST_RERUNS_PER_TRIAL = 3


@dataclass(slots=True)
class Attempt:
    """One attempt of a trial, queued or running (the loop's queue and a worker's ``trial``)."""

    index: int
    params: Any
    attempt: int  # the attempt number as stored (continues across sessions)
    session_attempts: int  # attempts made in this session, for the retry budget
    started_mono: float = 0.0
    # out-of-memory recovery: the params this attempt runs with when they differ from ``params``
    attempt_params: dict[str, Any] | None = None
    mixed_precision: bool = False
    oom_attempts: int = 0
    sized: bool = False  # the remembered size was looked up for this trial already
    budget_kills: int = 0  # attempts killed at the memory budget beside other trials, this session
    predicted_size: bool = False  # attempt_params are the size the peak model predicted to fit
    peak_gpu_bytes: int | None = None  # the last attempt's GPU peak, where the backend reads GPU memory

    @property
    def sent_params(self) -> Any:
        return self.attempt_params if self.attempt_params is not None else self.params


@dataclass(slots=True)
class WorkerRecord:
    """What the session knows of one worker (owned by the pool; fields written under its lock)."""

    worker_id: int
    slot: int
    handle: BaseWorker  # the process, wherever the backend runs it
    started_mono: float
    state: str = "starting"  # starting, loading, idle, busy, trimming, exiting, dead
    trial: Attempt | None = None
    trials_done: int = 0
    rss_after: list[int] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    # the C allocator's bytes in use after each trial, aligned with rss_after (None: no reading)
    bytes_in_use: list[int | None] = field(default_factory=list)
    cur_rss: int | None = None
    trial_peak_rss: int = 0
    trial_peak_gpu: int | None = None
    # staged trials: this worker's stages (RSS after each checkpoint, peak during each stage)
    stages_done: int = 0
    stage_rss_after: list[int] = field(default_factory=list)
    stage_peaks: list[int] = field(default_factory=list)
    stage_peak_rss: int = 0
    stage_exit: RecycleDecision | None = None
    kill: KillDecision | None = None
    fatal: str | None = None
    protocol_error: str | None = None
    ended: bool = False
    # the pool: a replacement started early (framework imported) that waits for a recycle; the
    # threads it was started with and how many workers ran then; what the budget holds for its trial
    spare: bool = False
    threads: int = 0
    concurrency: int = 1
    reserved_bytes: float | None = None
    waited: bool = False
    prestart_said: bool = False
    budget_kill: BudgetKill | None = None  # why the sampler killed it at the memory budget
    # under a GPU budget: its GPU (NVML index) and the share its caps were set from; its latest
    # GPU reading, what the budget holds for its trial, and its latest good trial's GPU peak
    gpu_index: int | None = None
    gpu_share_bytes: int | None = None
    cur_gpu: int | None = None
    gpu_reserved_bytes: float | None = None
    gpu_last_peak: int | None = None
    gpu_waited: bool = False

    def trial_ended(self, rss_after: int, peak: int, bytes_in_use: Any) -> None:
        """Count a trial the worker finished, with its readings (called under the pool's lock)."""
        self.trials_done += 1
        self.rss_after.append(rss_after)
        self.peaks.append(peak)
        self.bytes_in_use.append(bytes_in_use if isinstance(bytes_in_use, int) else None)


@dataclass(frozen=True, slots=True)
class Rerun:
    """A part's decision: the loop puts ``attempt`` at the head of its queue (it runs next)."""

    attempt: Attempt


@dataclass(frozen=True, slots=True)
class Finish:
    """A part's decision: the loop ends ``run``'s attempt with ``status`` (recorded, with the flight
    recorder on the attempt only); what follows (a retry, a smaller rerun, the trial's end) is the
    recovery's to decide."""

    run: Attempt
    status: str
    error: Failure | None = None
    value: Any = None
    peak: int | None = None
    duration_s: float | None = None
    flight: dict[str, Any] | None = None


#: what a part hands the loop after a worker's end or a trial's: nothing to do, a rerun, or an end
LoopAction: TypeAlias = Rerun | Finish | None
