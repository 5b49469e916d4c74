"""The session's watchdog tick: read every worker's tree, ask the limit verdict
(:func:`~trainguard.runner.policy.limit_verdict`: the hard limits, the soft limit's pressure and
grace) and check the run's memory budget, kill at once; and the samples it keeps until the loop
stores them.

It runs on the :class:`~trainguard.process.watch.Watchdog` thread, because a kill must not wait
for the loop; the loop records each kill (the store has one writer) and flushes the samples.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainguard.process.watch import Watchdog
from trainguard.runner.policy import LimitReading, growth_rate, limit_verdict
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.process.charge import MemorySplit
    from trainguard.runner.policy import KillDecision, Policy
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import WorkerRecord
    from trainguard.runner.session.soft_limit_and_flight import LastSeconds

__all__ = ["TreeSampling"]


logger = logging.getLogger(__name__)

Sample = tuple[float, int, "int | None", "int | None"]


@dataclass(eq=False, repr=False, kw_only=True)
class TreeSampling:
    """Owns the samples not stored yet and the highest sum seen over the budget."""

    pool: Pool
    policy: Policy
    recorder: Recorder
    interval_s: float
    uss: bool
    #: each worker's last seconds (flight recorder) and memory pressure
    last: LastSeconds

    def __post_init__(self) -> None:
        self._samples: dict[int, list[Sample]] = {}
        self._nvml: Callable[[], dict[int, int] | None] | None = None
        self._watchdog: Watchdog | None = None
        self._last_flush = 0.0
        # the highest tree sum over the budget seen and not recorded yet; the highest recorded
        self._budget_over: tuple[int, float] | None = None
        self._budget_over_recorded = 0.0

    def start(self) -> None:
        try:
            from trainguard.probes.nvml import gpu_memory_by_pid, nvml_available

            if nvml_available():
                self._nvml = gpu_memory_by_pid
        except ImportError:
            self._nvml = None
        self._watchdog = Watchdog(self.tick, self.interval_s, name="trainguard-sampler").start()

    def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop(timeout_s=2.0)

    def tick(self) -> None:
        """One pass (watchdog thread): read each tree, raise the peaks, carry out the limit verdict
        (pressure, kill), then hold the sum of every tree to the memory budget."""
        pool = self.pool
        gpu_map = self._nvml() if self._nvml is not None else None
        with pool.lock:
            workers = [w for w in pool.workers if w.state != "dead"]
        now_wall = time.time()
        sole = sum(1 for w in workers if w.trial is not None) == 1
        for worker in workers:
            reading = pool.read_tree(worker, uss=self.uss)
            if reading is None:
                continue
            rss, uss = reading
            split = self._split(worker, rss, sole)
            # what is recorded: the RSS, or more while tmpfs holds what the tree has not mapped
            seen = rss if split is None else split.seen_bytes
            gpu = worker.handle.gpu_bytes(gpu_map)
            with pool.lock:
                worker.cur_rss = seen
                worker.cur_gpu = gpu
                run, kill = worker.trial, worker.kill
                if run is not None:
                    worker.trial_peak_rss = max(worker.trial_peak_rss, seen)
                    worker.stage_peak_rss = max(worker.stage_peak_rss, seen)
                    if gpu is not None:
                        worker.trial_peak_gpu = max(worker.trial_peak_gpu or 0, gpu)
                self._samples.setdefault(worker.worker_id, []).append((now_wall, rss, uss, gpu))
            mono = time.monotonic()
            self.last.on_sample(
                worker.worker_id, worker.handle, rss_bytes=rss, gpu_bytes=gpu, mono_s=mono, wall_s=now_wall
            )
            if run is None or kill is not None:
                continue
            trial = (run.index, run.attempt, run.started_mono)
            if worker.handle.enforces_limits:
                # the verdict is made next to the worker (its node's agent): its pressure kept here
                self.last.adopt_pressure(worker.worker_id, worker.handle, trial=trial, now_s=mono)
                continue
            decision = self._verdict(worker, trial, rss=rss, gpu=gpu, split=split, now_s=mono)
            if decision is not None:
                with pool.lock:
                    if worker.trial is not run:
                        continue
                    worker.kill = decision
                self.last.before_kill(worker.worker_id, worker.handle)
                worker.handle.kill()
                logger.info("worker %d: %s", worker.worker_id, decision.message)
        self.last.prune(time.monotonic())
        if pool.gpu is not None:
            pool.budget.kill_over_gpu()
        budget = pool.planner.budget_bytes
        if budget is not None:
            total = pool.budget.kill_over(budget)
            with pool.lock:
                if total > budget and (self._budget_over is None or total > self._budget_over[0]):
                    self._budget_over = (total, now_wall)

    def _verdict(
        self,
        worker: WorkerRecord,
        trial: tuple[int, int, float],
        *,
        rss: int,
        gpu: int | None,
        split: MemorySplit | None,
        now_s: float,
    ) -> KillDecision | None:
        """The one limit verdict on this sample (:func:`~trainguard.runner.policy.limit_verdict`, as
        the Ray and Slurm agents make it next to their workers): new pressure is signalled and kept;
        the kill, if any, returned."""
        wid = worker.worker_id
        # the growth rate is read only where a soft limit can use it (a cost on the watchdog's path)
        rate = growth_rate(self.last.rss_series(wid)) if self.policy.soft_limit is not None else None
        reading = LimitReading(rss, gpu, now_s - trial[2], split, rate, now_s)
        verdict = limit_verdict(self.policy, reading, pressure=self.last.pressure_on(wid, trial))
        if verdict.pressure is not None:
            self.last.raise_pressure(wid, worker.handle, verdict.pressure, trial=trial, now_s=now_s)
        return verdict.kill

    def _split(self, worker: WorkerRecord, rss: int, sole: bool) -> MemorySplit | None:
        """The tree's memory by kind and in tmpfs, where it matters (a trial runs, and the RSS is
        over the limit or tmpfs holds something); a failed reading is logged and skipped."""
        if worker.trial is None or worker.handle.enforces_limits:
            return None
        try:
            return worker.handle.memory_split(
                rss, limit_bytes=self.policy.memory_limit, sole=sole, private=self.pool.private
            )
        except Exception:  # noqa: BLE001 - a sampler fault must never end the run
            logger.exception(
                "reading the tmpfs memory of worker %d failed; reading skipped", worker.worker_id
            )
            return None

    def flush(self, force: bool = False) -> None:
        """Store the samples taken since the last flush (at most once a second unless forced), and
        the highest sum over the budget seen, when it is a new high (loop thread)."""
        now = time.monotonic()
        if not force and now - self._last_flush < 1.0:
            return
        self._last_flush = now
        budget = self.pool.planner.budget_bytes
        with self.pool.lock:
            over, self._budget_over = self._budget_over, None
            batches, self._samples = self._samples, {}
        if over is not None and budget is not None and over[0] > self._budget_over_recorded:
            self._budget_over_recorded = over[0]
            # the highest sum seen over the budget is said too (the kill that follows is its own event)
            self.recorder.event(
                "budget_exceeded",
                f"the workers' trees summed {format_bytes(over[0])}, over the memory budget "
                f"{format_bytes(budget)} (one sample; the highest so far)",
                data={"rss_bytes": over[0], "budget_bytes": budget, "at": over[1]},
            )
        self.recorder.add_samples(batches)
