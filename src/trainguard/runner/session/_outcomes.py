"""The session's outcomes: each attempt's end recorded, each trial's result handed out, the counts
the progress reads, and the stop at a failed trial under ``on_error='stop'``.

:class:`Outcomes` owns the results waiting to be yielded, the counts (read by
:meth:`~trainguard.runner.session._loop.Session.progress` from any thread, under its own lock) and
the result that stopped the run. What follows a failed attempt is
:class:`~trainguard.runner.session._recovery.Recovery`'s to decide; :meth:`Outcomes.finish_attempt`
hands the loop the attempt that follows (the loop queues it), never the queue itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trainguard.runner.session._eta import eta_seconds
from trainguard.runner.session._results import RunProgress, TrialResult, WorkerProgress

if TYPE_CHECKING:
    from trainguard.outcomes import Failure
    from trainguard.runner.policy import Policy
    from trainguard.runner.session._predict import Predictions
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import Attempt, Finish, WorkerRecord
    from trainguard.runner.session._recovery import Recovery
    from trainguard.runner.session._stages import Stages
    from trainguard.store import TrialRecord

__all__ = ["Outcomes"]


@dataclass(eq=False, repr=False, kw_only=True)
class Outcomes:
    """The ends of one session's attempts and trials, and what they add up to."""

    policy: Policy
    recorder: Recorder
    recovery: Recovery
    stages: Stages
    predictions: Predictions
    seed_of: Callable[[int], int | None]
    #: results to yield, in the order the trials finished
    out: deque[TrialResult] = field(default_factory=deque, init=False)
    #: the failed trial that stopped the run (``on_error='stop'``), else None
    stop_result: TrialResult | None = field(default=None, init=False)
    # the counts below are written by the loop and read by progress() from any thread, under it
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    done: int = field(default=0, init=False)
    failed: int = field(default=0, init=False)
    done_this_session: int = field(default=0, init=False)
    started_mono: float = field(default_factory=time.monotonic, init=False)
    last_done_mono: float | None = field(default=None, init=False)

    def progress(
        self, name: str, total: int, workers: tuple[WorkerProgress, ...], recycles: int
    ) -> RunProgress:
        """The run's progress now (any thread)."""
        with self.lock:
            done, failed, this_session, last_done = (
                self.done,
                self.failed,
                self.done_this_session,
                self.last_done_mono,
            )
        now, started = time.monotonic(), self.started_mono
        eta = eta_seconds(
            started=started, last_done=last_done, done=this_session, remaining=total - done, now=now
        )
        busy = sum(1 for w in workers if w.state == "busy")
        return RunProgress(name, total, done, failed, busy, now - started, eta, workers, recycles)

    def resumed(self, record: TrialRecord) -> TrialResult:
        """A trial an earlier session of the run finished: counted, its result handed back."""
        with self.lock:
            self.done += 1
            self.failed += record.status == "failed"
        return TrialResult.from_record(record)

    def finish_attempt(self, worker: WorkerRecord | None, end: Finish) -> Attempt | None:
        """Record an attempt's end (a flight recorder on the attempt only); the attempt that follows
        (the loop queues it at its head), or None when the trial is finished."""
        run, status = end.run, end.status
        worker_id = worker.worker_id if worker else None
        run.peak_gpu_bytes = worker.trial_peak_gpu if worker else None
        error = self.recovery.failure(run, status, end.error, worker_id)
        stored = error if end.flight is None or error is None else replace(error, flight_recorder=end.flight)
        if status != "ok":
            self.stages.attempt_ended(run.index)  # a half-written checkpoint is never resumed
        self.recorder.finish_attempt(
            run,
            status,
            error=stored,
            peak=end.peak,
            duration_s=end.duration_s,
        )
        self.predictions.observe(run, status, end.peak, worker)
        following, error = self.recovery.next_attempt(worker, replace(end, error=error))
        if following is not None:
            return following
        self.finish_trial(run, status, end.value, error, end.peak, worker_id, end.duration_s)
        return None

    def finish_trial(
        self,
        run: Attempt,
        status: str,
        value: Any,
        error: Failure | None,
        peak: int | None,
        worker_id: int | None,
        duration_s: float | None,
    ) -> None:
        """Store a trial's outcome and hand its result out (also for a trial never started: its
        ``attempts`` are then the ones before this session's); a failed one under
        ``on_error='stop'`` becomes :attr:`stop_result`."""
        started = error is None or error.status != "predicted_over_limit"
        if started:
            peak, duration_s = self.stages.whole_trial(run, peak, duration_s)
        fields: dict[str, Any] = {
            "status": "ok" if status == "ok" else "failed",
            "value": value,
            "error": error,
            "attempts": run.attempt if started else run.attempt - 1,
            "peak_rss_bytes": peak,
            "worker_id": worker_id,
            "duration_s": duration_s,
        }
        if self.recorder.finish_trial(run.index, **fields) is False:
            return  # already finished by an earlier session: never report it twice
        self.stages.trial_done(run.index)
        result = TrialResult(
            index=run.index,
            params=run.params,
            **fields,
            ran_with=run.attempt_params,
            seed=self.seed_of(run.index),
            predicted_peak_bytes=self.predictions.predicted_peak_bytes(run.index),
            peak_gpu_bytes=run.peak_gpu_bytes if started else None,
        )
        with self.lock:
            self.done += 1
            self.done_this_session += 1
            self.last_done_mono = time.monotonic()
            self.failed += not result.ok
        self.out.append(result)
        if not result.ok and self.policy.on_error == "stop" and self.stop_result is None:
            self.stop_result = result
