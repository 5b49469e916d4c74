"""The pool: the session's worker records, their slots, spares, reservations and budget kills, and
the pool's shape (how many workers, how many threads each, under the memory budget).

:class:`Pool` owns the worker records (the sampler thread reads and marks them under its lock) and
starts, retires and reaps workers through the backend. :class:`PoolPlanner` keeps what the pure
decisions of :mod:`trainguard.runner.policy` (``budget_workers``, ``decide_budget``,
``should_prestart``, ``choose_threads``) are fed (per-trial peaks of fresh workers, trial durations
by thread count) and says what changed, so that it is recorded with its reason.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainguard import process
from trainguard.exceptions import WorkerCrashedError
from trainguard.runner._protocol import MESSAGE_OVERHEAD_BYTES
from trainguard.runner.backends.base import WorkerSpec
from trainguard.runner.policy import (
    BudgetDecision,
    RecycleDecision,
    WorkerHistory,
    budget_workers,
    choose_threads,
    recycle_expected_soon,
    should_prestart,
    worker_history,
)
from trainguard.runner.session._gpu_pool import GpuPool
from trainguard.runner.session._pool_budget import PoolBudget
from trainguard.runner.session._records import WorkerRecord
from trainguard.runner.session._results import WorkerProgress

if TYPE_CHECKING:
    from trainguard.runner._config import RunConfig
    from trainguard.runner.backends.base import BaseBackend
    from trainguard.runner.policy import Policy
    from trainguard.runner.session._recorder import Recorder

__all__ = ["Pool", "PoolPlanner", "ThreadChoice"]

logger = logging.getLogger(__name__)

#: trials (after each worker's first) measured per thread count before the choice is made
THREAD_SAMPLES = 3


@dataclass(slots=True)
class ThreadChoice:
    """Threads per worker, chosen by measurement when the user did not set them.

    For ``k`` workers on ``cores`` cores the candidates are ``cores // k`` (no core shared) and, when
    different, ``cores`` (each worker may use every core, as a plain process does). Workers started
    while a choice is open run the first candidate until it has :data:`THREAD_SAMPLES` timed trials
    (each worker's first trial, which pays the framework import, is left out), then one worker at
    a time runs the second; the faster median wins and every later worker gets it. With no worker
    started after the first candidate is measured (no recycling), the first candidate stays, and
    :meth:`unresolved` says so.
    """

    cores: int
    explicit: int | None = None
    samples: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    chosen: dict[int, int] = field(default_factory=dict)

    def candidates(self, workers: int) -> tuple[int, ...]:
        base = max(1, self.cores // max(1, workers))
        return (base,) if base == self.cores else (base, self.cores)

    def for_new_worker(self, workers: int, live_threads: Sequence[int] = ()) -> int:
        """Threads for a worker starting now among ``workers``; ``live_threads`` are the settings of
        the workers alive now: one worker at a time measures the alternative, so a generation of
        replacements started together does not all run the setting that may be the slower."""
        if self.explicit is not None:
            return self.explicit
        if workers in self.chosen:
            return self.chosen[workers]
        options = self.candidates(workers)
        for threads in options:
            if len(self.samples.get((workers, threads), ())) < THREAD_SAMPLES:
                if threads != options[0] and threads in live_threads:
                    return options[0]  # another worker is measuring it now
                return threads
        return options[0]

    def unresolved(self, used: Sequence[tuple[int, int]]) -> list[str]:
        """For each ``(workers, threads)`` a session ran with and left unchosen, why it stayed."""
        out = []
        for workers in sorted({w for w, _ in used}):
            options = self.candidates(workers)
            if self.explicit is not None or workers in self.chosen or len(options) < 2:
                continue
            counts = {t: len(self.samples.get((workers, t), ())) for t in options}
            out.append(
                f"{options[0]} thread{'s' if options[0] != 1 else ''} per worker with {workers} workers "
                f"(cores // workers), not compared with {options[1]}: timed trials "
                + ", ".join(f"{t} thread{'s' if t != 1 else ''}: {n}" for t, n in counts.items())
                + f" (each needs {THREAD_SAMPLES}; the other setting is tried by a worker started after the first is measured)"
            )
        return out

    def observe(self, workers: int, threads: int, duration_s: float) -> BudgetDecision | None:
        """One timed trial (not a worker's first) of a worker started with ``threads`` among
        ``workers``; returns the choice when this trial completes the measurement."""
        if self.explicit is not None or workers in self.chosen:
            return None
        options = self.candidates(workers)
        if len(options) < 2 or threads not in options:
            return None
        self.samples.setdefault((workers, threads), []).append(duration_s)
        measured = {t: self.samples.get((workers, t), []) for t in options}
        decision = choose_threads(workers, measured, min_samples=THREAD_SAMPLES)
        if decision is not None:
            self.chosen[workers] = decision.values["threads"]
        return decision


class PoolPlanner:
    """One session's pool: worker count under the memory budget (or the fixed count), threads."""

    def __init__(
        self, *, max_workers: int, budget_bytes: int | None, cores: int, threads: int | None
    ) -> None:
        self.max_workers = max_workers
        self.budget_bytes = budget_bytes
        self.threads = ThreadChoice(cores=cores, explicit=threads)
        self.fresh_peaks: list[int] = []
        self.spare_bytes: int | None = None
        self.target = max_workers if budget_bytes is None else 1
        # the most workers at once after a kill at the budget: later measurements do not raise it
        self.cap: int | None = None
        self._last_reason: str | None = None

    @property
    def budgeted(self) -> bool:
        return self.budget_bytes is not None

    @property
    def fresh_peak_bytes(self) -> int | None:
        return max(self.fresh_peaks) if self.fresh_peaks else None

    def initial(self) -> BudgetDecision | None:
        """The concurrency to start with (recorded once), under a budget."""
        if self.budget_bytes is None:
            return None
        decision = budget_workers(self.budget_bytes, self.max_workers, None)
        self.target = decision.values["workers"]
        self._last_reason = decision.message
        return decision

    def first_trial_done(self, peak_bytes: int, rss_after_bytes: int) -> BudgetDecision | None:
        """A fresh worker's first trial ended: its peak sizes the pool; a change is returned."""
        if peak_bytes <= 0:
            return None
        self.fresh_peaks.append(int(peak_bytes))
        if self.spare_bytes is None or rss_after_bytes < self.spare_bytes:
            self.spare_bytes = int(rss_after_bytes)
        if self.budget_bytes is None:
            return None
        decision = budget_workers(
            self.budget_bytes, min(self.max_workers, self.cap or self.max_workers), self.fresh_peak_bytes
        )
        workers = decision.values["workers"]
        if workers == self.target and len(self.fresh_peaks) > 1:
            return None  # the first measurement is always recorded, even when it changes nothing
        previous, self.target = self.target, workers
        return BudgetDecision(decision.action, decision.message, {**decision.values, "previous": previous})

    def lower_after_kill(self, workers: int, why: str) -> BudgetDecision | None:
        """A worker was killed at the budget with ``workers`` others still running trials: run at
        most that many (at least 1) from now on, so the run does not cross the budget again."""
        workers = max(1, min(workers, self.target))
        self.cap = workers if self.cap is None else min(self.cap, workers)
        if workers == self.target:
            return None
        previous, self.target = self.target, workers
        return BudgetDecision(
            "workers",
            f"{workers} worker{'s' if workers != 1 else ''} from now on, {previous} before: {why}",
            {"workers": workers, "previous": previous, "cap": self.cap, "budget_bytes": self.budget_bytes},
        )

    def spare_ready(self, rss_bytes: int | None) -> None:
        """A replacement started early is ready: its size is what the next one will take."""
        if rss_bytes:
            self.spare_bytes = int(rss_bytes)


@dataclass(eq=False, repr=False, kw_only=True)
class Pool:
    """The worker records of one session and what is done to them: start, reserve, retire, reap.

    Thread safety: the loop's thread changes the set of workers and their states; the sampler
    thread reads them and marks kills; both hold :attr:`lock` for that. Store writes go through the
    recorder, from the loop's thread only.
    """

    config: RunConfig
    policy: Policy
    backend: BaseBackend
    recorder: Recorder
    fn_kind: str
    #: shared data in use: each worker is charged its private memory (USS) wherever RSS is used
    private: bool

    def __post_init__(self) -> None:
        config = self.config
        self.lock = threading.Lock()
        self.workers: list[WorkerRecord] = []
        self.next_worker_id = 0
        self.recycles_by_slot: dict[int, int] = {}
        self.capture_dir: str | None = None
        self.planner = PoolPlanner(
            max_workers=config.workers,
            budget_bytes=config.memory_budget_bytes,
            cores=config.cores,
            threads=None if config.threads_chosen else config.threads,
        )
        self.no_prestart = False  # a replacement started early was killed at the budget
        #: the GPU budget's slots, shares and kills (Runner(gpu_memory_budget=...)), else None
        self.gpu = (
            GpuPool(config.gpu_budget, max_workers=config.workers, predict_peaks=self.policy.predict_peaks)
            if config.gpu_budget is not None
            else None
        )
        #: the memory and GPU budgets: admission, kills and fewer workers after a kill
        self.budget = PoolBudget(self)

    # -- views ------------------------------------------------------------------------------------

    def busy(self) -> bool:
        return any(w.state == "busy" for w in self.workers)

    def live(self) -> list[WorkerRecord]:
        return [w for w in self.workers if w.state not in ("dead", "exiting")]

    def reserved(self, exclude: WorkerRecord | None = None) -> float:
        """What the live workers hold or are expected to reach, against the memory budget: the
        predicted peak of a running trial (or more, as sampled), the RSS of an idle worker, and the
        measured peak of a fresh worker's trial for a worker not ready yet."""
        total = 0.0
        fresh = float(self.planner.fresh_peak_bytes or 0)
        with self.lock:
            workers = [w for w in self.workers if w.state != "dead" and w is not exclude]
            for w in workers:
                current = float(w.cur_rss or 0)
                if w.state == "busy":
                    total += max(w.reserved_bytes or 0.0, current, float(w.trial_peak_rss))
                elif w.spare:
                    total += max(current, float(self.planner.spare_bytes or 0) if w.state != "idle" else 0.0)
                elif w.trials_done == 0:
                    total += max(current, fresh)
                else:
                    total += current
        return total

    def progress(self) -> tuple[tuple[WorkerProgress, ...], int]:
        """The live workers as progress displays show them, and the recycles so far."""
        with self.lock:
            workers = tuple(
                WorkerProgress(
                    w.worker_id,
                    w.slot,
                    w.handle.pid,
                    w.state,
                    w.cur_rss,
                    w.trials_done,
                    w.trial.index if w.trial else None,
                    self.recycles_by_slot.get(w.slot, 0),
                )
                for w in self.workers
                if w.state != "dead"
            )
            return workers, sum(self.recycles_by_slot.values())

    def history(self, worker: WorkerRecord, *, with_supervisor: bool = True) -> WorkerHistory:
        # the first and latest readings only: a decision costs the same at trial 100,000 as at 300
        return worker_history(
            worker.trials_done,
            worker.rss_after,
            worker.peaks,
            self.supervisor_rss() if with_supervisor else 0,
            worker.bytes_in_use,
        )

    def supervisor_rss(self) -> int:
        """This process's own RSS, when the policy's budget counts it (0 otherwise: not read)."""
        if not self.policy.budget_counts_supervisor:
            return 0
        return process.statm_rss_bytes(os.getpid()) or 0  # None (unreadable): the worker alone

    def read_tree(
        self, worker: WorkerRecord, *, uss: bool = False, rediscover: bool = False
    ) -> tuple[int, int | None] | None:
        """One reading of a worker's tree, or None; a failed reading is logged and skipped, since
        losing a sample is harmless and a sampler fault must never end the run or its other workers."""
        try:
            if not self.private:
                return worker.handle.read(uss=uss, rediscover=rediscover)
            reading = worker.handle.read(uss=True, rediscover=rediscover)
            if reading is None or reading[1] is None:
                return reading
            return reading[1], reading[1]
        except Exception:  # noqa: BLE001 - see above
            logger.exception("reading the memory of worker %d failed; reading skipped", worker.worker_id)
            return None

    # -- starting ---------------------------------------------------------------------------------

    def maintain(self, needed: int) -> None:
        """Start (or promote a spare to) workers until ``needed`` are live, as the budget allows."""
        needed = min(self.planner.target, needed)
        if self.gpu is not None:
            needed = min(needed, self.gpu.plan.total_slots)
        live = [w for w in self.live() if not w.spare]
        used_slots = {w.slot for w in self.live()}
        while len(live) < needed:
            spare = next((w for w in self.live() if w.spare), None)
            if spare is not None:
                with self.lock:
                    spare.spare = False
                    if self.config.gpu_slots is None:  # its slot label: the lowest free one
                        spare.slot = next(
                            s for s in range(len(self.workers) + 1) if s not in used_slots - {spare.slot}
                        )
                live.append(spare)
                used_slots.add(spare.slot)
                continue
            if self.planner.budgeted and live:
                fresh = self.planner.fresh_peak_bytes
                if fresh is None or self.reserved() + fresh > (self.planner.budget_bytes or 0):
                    break  # no room for another fresh worker's trial now
            gpu_index = None if self.gpu is None else self.gpu.free_device(self.workers)
            if self.gpu is not None and gpu_index is None:
                break  # every GPU's slots are taken, or none has room for a fresh worker's trial now
            slot = next(s for s in range(len(self.workers) + self.config.workers + 1) if s not in used_slots)
            live.append(self.start_worker(slot, gpu_index=gpu_index))
            used_slots.add(slot)

    def start_worker(
        self, slot: int, *, preload: tuple[str, ...] = (), spare: bool = False, gpu_index: int | None = None
    ) -> WorkerRecord:
        env = dict(self.config.base_env)
        concurrency = self.planner.target
        threads = self.planner.threads.for_new_worker(concurrency, [w.threads for w in self.live()])
        for var in self.config.thread_vars:
            env[var] = str(threads)
        bootstrap = self.config.bootstrap(threads=threads, preload=preload)
        if self.config.gpu_slots is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.config.gpu_slots[slot % len(self.config.gpu_slots)]
        placed = {} if self.gpu is None or gpu_index is None else self.gpu.place(gpu_index, env, bootstrap)
        spec = WorkerSpec(
            worker_id=self.next_worker_id,
            slot=slot,
            env=env,
            bootstrap=bootstrap,
            fn_kind="node" if self.fn_kind == "node" else "python",
            max_message_bytes=self.config.max_result_bytes + MESSAGE_OVERHEAD_BYTES,
            tree_tracking=self.config.tree_tracking,
            memory_limit_bytes=self.policy.memory_limit,
            capture_dir=self.capture_dir,
            detail={"CUDA_VISIBLE_DEVICES": env["CUDA_VISIBLE_DEVICES"], **placed}
            if self.config.gpu_slots or placed
            else {},
        )
        handle = self.backend.start(spec)
        worker = WorkerRecord(
            worker_id=spec.worker_id,
            slot=slot,
            handle=handle,
            started_mono=time.monotonic(),
            spare=spare,
            threads=threads,
            concurrency=concurrency,
            gpu_index=placed.get("gpu"),
            gpu_share_bytes=placed.get("gpu_share_bytes"),
        )
        self.next_worker_id += 1
        with self.lock:
            self.workers.append(worker)
        self.recorder.start_worker(
            worker.worker_id,
            handle.pid,
            {
                "slot": slot,
                "tree_tracking": handle.tracking,
                **handle.where,
                **spec.detail,
                "threads": threads,
                "workers_at_start": concurrency,
                **({"spare": True, "preload": bootstrap["preload"]} if spare else {}),
            },
        )
        logger.debug("started worker %d (pid %d) in slot %d", worker.worker_id, handle.pid, slot)
        return worker

    def check_starting(self) -> None:
        """A worker not ready after ``start_timeout`` is killed and stops the run (its import hangs)."""
        timeout = self.config.start_timeout_s
        now = time.monotonic()
        for worker in self.workers:
            if worker.state in ("starting", "loading") and now - worker.started_mono > timeout:
                worker.handle.kill()
                self.recorder.event(
                    "kill",
                    f"worker {worker.worker_id} killed: not ready after {timeout:g} s ({worker.state})",
                    data={"start_timeout_s": timeout, "state": worker.state},
                    worker=worker,
                )
                raise WorkerCrashedError(
                    f"worker {worker.worker_id} was not ready after {timeout:g} s "
                    "(preload or fn import too slow or stuck): raise start_timeout or check the import",
                    pid=worker.handle.pid,
                )

    # -- after a trial ----------------------------------------------------------------------------

    def plan_after_trial(
        self,
        worker: WorkerRecord,
        peak: int,
        rss_after: int,
        duration_s: float,
        *,
        run: Any = None,
        stats: dict[str, Any] | None = None,
    ) -> None:
        """Feed one good trial to the planner: a fresh worker's first peak sizes the pool under a
        budget (its GPU peak the GPU slots under a GPU budget); timed trials choose threads per
        worker. Changes are recorded with their reasons."""
        if self.gpu is not None and run is not None:
            plan = self.gpu.trial_ended(worker, run.sent_params, stats or {})
            if plan is not None:
                self.recorder.event(
                    "workers", f"GPU budget: {plan.message}", data=plan.to_dict(), worker=worker
                )
        if worker.trials_done == 1:
            change = self.planner.first_trial_done(peak, rss_after)
            if change is not None:
                self.recorder.event("workers", change.message, data=change.values, worker=worker)
            return
        choice = self.planner.threads.observe(worker.concurrency, worker.threads, duration_s)
        if choice is not None:
            self.recorder.event("threads", choice.message, data=choice.values, worker=worker)

    def maybe_prestart(self, worker: WorkerRecord, stats: dict[str, Any]) -> None:
        """Under a budget with room, start the replacement of a worker expected to be recycled
        soon, importing the frameworks its trials use, so the recycle costs no import."""
        if not self.planner.budgeted or self.no_prestart or any(w.spare for w in self.live()):
            return
        if self.gpu is not None:
            return  # a spare would hold a GPU slot it has not been given
        if self.backend.name != "local":
            return  # a spare is a worker beyond the slots a remote backend was opened with
        if not recycle_expected_soon(self.policy, self.history(worker)):
            return
        decision = should_prestart(
            self.planner.budget_bytes or 0,
            reserved_bytes=self.reserved(),
            spare_bytes=self.planner.spare_bytes,
            recycle_expected=True,
        )
        if decision is None:
            return
        if decision.action == "no_room":
            if not worker.prestart_said:  # said once per worker
                worker.prestart_said = True
                self.recorder.event(
                    "prestart",
                    f"worker {worker.worker_id}: {decision.message}",
                    data=decision.values,
                    worker=worker,
                )
            return
        frameworks = tuple(f for f in stats.get("frameworks") or () if isinstance(f, str))
        spare = self.start_worker(worker.slot + self.config.workers, preload=frameworks, spare=True)
        self.recorder.event(
            "prestart",
            f"worker {spare.worker_id} started early to replace worker {worker.worker_id}: {decision.message}",
            data={**decision.values, "preload": list(frameworks), "replaces": worker.worker_id},
            worker=spare,
        )

    # -- ending -----------------------------------------------------------------------------------

    def retire(self, worker: WorkerRecord, decision: RecycleDecision) -> None:
        with self.lock:
            worker.state = "exiting"
            self.recycles_by_slot[worker.slot] = self.recycles_by_slot.get(worker.slot, 0) + 1
        try:
            worker.handle.send({"op": "exit"})
        except OSError:
            pass
        self.recorder.end_worker(
            worker,
            decision.reason.value,
            {"rule": decision.rule, "why": decision.message, "trials": worker.trials_done, **decision.values},
        )
        logger.info("worker %d recycled: %s", worker.worker_id, decision.message)
        self.recorder.event(
            "recycle",
            f"worker {worker.worker_id} recycled after {worker.trials_done} "
            f"trial{'s' if worker.trials_done != 1 else ''}: {decision.message}",
            data={"rule": decision.rule, "trials": worker.trials_done, **decision.values},
            worker=worker,
        )
        # wait for it to be gone before a replacement starts: its memory must be free first
        self.reap(worker, grace_s=10.0)

    def trim(self, worker: WorkerRecord) -> None:
        """Ask an idle worker for ``malloc_trim(0)`` before deciding on its recycle (a retention):
        it takes no trial until it answers (the loop's ``trimmed``)."""
        with self.lock:
            worker.state = "trimming"
        try:
            worker.handle.send({"op": "trim"})
        except OSError:
            pass  # it died; the EOF on its pipe reports the death

    def reap(self, worker: WorkerRecord, grace_s: float) -> int | None:
        rc, killed = worker.handle.end(grace_s)
        if killed:
            try:
                self.recorder.event(
                    "kill",
                    f"worker {worker.worker_id} killed: still running {grace_s:g} s after it was told to exit",
                    data={"grace_s": grace_s, "state": worker.state},
                    worker=worker,
                )
            except Exception:  # noqa: BLE001 - reaping must finish even if the store cannot be written
                logger.exception("could not record the kill of worker %d", worker.worker_id)
        with self.lock:
            worker.state = "dead"
        return rc

    def shutdown(self, status: str) -> None:
        """End every worker still there (a busy one is killed) and record each end."""
        for worker in self.workers:
            if worker.state == "dead":
                continue
            interrupted = worker.state == "busy"
            if interrupted:
                worker.handle.kill()
                try:
                    index = worker.trial.index if worker.trial is not None else None
                    self.recorder.event(
                        "kill",
                        f"worker {worker.worker_id} killed in trial {index}: the run was {status}",
                        data={"run_status": status},
                        worker=worker,
                        index=index,
                    )
                except Exception:  # noqa: BLE001 - shutting down must reach every worker
                    logger.exception("could not record the kill of worker %d", worker.worker_id)
            elif worker.state != "exiting":
                try:
                    worker.handle.send({"op": "exit"})
                except OSError:
                    pass
            detail: dict[str, Any] = {"trials": worker.trials_done}
            if interrupted:
                detail["message"] = "stopped in the middle of a trial"
            try:
                self.recorder.end_worker(worker, "shutdown", detail)
            except Exception:  # noqa: BLE001 - shutting down must reach every worker
                logger.exception("could not record the end of worker %d", worker.worker_id)
            self.reap(worker, grace_s=3.0)
        try:
            used = [(w.concurrency, w.threads) for w in self.workers]
            for message in self.planner.threads.unresolved(used):
                self.recorder.event("threads", message)
        except Exception:  # noqa: BLE001 - shutting down must reach every worker
            logger.exception("could not record the thread choice")
