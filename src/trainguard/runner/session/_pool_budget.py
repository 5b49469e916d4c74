"""The pool's memory budgets, host and GPU: admission of each next trial, the kill when the trees'
sum crosses a budget (sampler thread), and fewer workers after such a kill.

:class:`PoolBudget` reads and marks the :class:`~trainguard.runner.session._pool.Pool`'s worker
records under the pool's lock; what to do is always the pure decisions' of
:mod:`trainguard.runner.policy` (``decide_budget``, ``choose_budget_kill``) and of the GPU pool.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import ConfigError
from trainguard.runner.policy import (
    KillDecision,
    RecycleDecision,
    choose_budget_kill,
    decide_budget,
    next_peak_estimate,
)
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner.policy import BudgetKill
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._records import WorkerRecord

__all__ = ["PoolBudget"]

logger = logging.getLogger(__name__)


class PoolBudget:
    """The memory budget and the GPU budget of one pool, as admission and as a hard bound."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def say_initial(self) -> None:
        """Record the concurrency the run starts with under its memory and GPU budgets."""
        start = self.pool.planner.initial()
        if start is not None:
            self.pool.recorder.event("workers", start.message, data=start.values)
        if self.pool.gpu is not None:
            plan = self.pool.gpu.plan
            self.pool.recorder.event("workers", f"GPU budget: {plan.message}", data=plan.to_dict())

    def check(self, worker: WorkerRecord, predicted_bytes: float | None = None, run: Any = None) -> bool:
        """Under a memory budget, whether ``worker`` may start its next trial now (sized by
        ``predicted_bytes``, the peak model's figure for that trial, when known, else by the
        worker's own history); it may be recycled, retired or kept waiting instead (each recorded
        with its reason). Under a GPU budget, ``run`` must fit the worker's GPU too."""
        if self.pool.planner.budgeted and not self._host_check(worker, predicted_bytes):
            return False
        if self.pool.gpu is not None and run is not None and worker.gpu_index is not None:
            return self._gpu_check(worker, run)
        return True

    def _gpu_check(self, worker: WorkerRecord, run: Any) -> bool:
        assert self.pool.gpu is not None
        decision = self.pool.gpu.admit(worker, run, self.pool.workers)
        if decision.action == "run":
            worker.gpu_waited = False
            return True
        if decision.action in ("wait", "other_device"):
            if not worker.gpu_waited:
                worker.gpu_waited = True
                self._say_wait(worker, decision)
            return False
        rule = "gpu_share" if decision.action == "recycle" else "gpu_budget_fewer_workers"
        self.pool.retire(worker, RecycleDecision(rule, decision.values, decision.message))
        return False

    def _say_wait(self, worker: WorkerRecord, decision: Any) -> None:
        """The event a worker held back by a budget gets, once a wait (the host's or a GPU's)."""
        self.pool.recorder.event(
            "budget_wait",
            f"worker {worker.worker_id} waits: {decision.message}",
            data=decision.values,
            worker=worker,
        )

    def _host_check(self, worker: WorkerRecord, predicted_bytes: float | None) -> bool:
        predicted = predicted_bytes
        if predicted is None:
            predicted = next_peak_estimate(self.pool.policy, self.pool.history(worker, with_supervisor=False))
        decision = decide_budget(
            self.pool.planner.budget_bytes or 0,
            predicted_peak_bytes=predicted,
            others_reserved_bytes=self.pool.reserved(exclude=worker),
            fresh_peak_bytes=self.pool.planner.fresh_peak_bytes,
            others_busy=any(w.state == "busy" for w in self.pool.workers if w is not worker),
        )
        if decision.action == "run":
            worker.reserved_bytes = decision.values["predicted_peak_bytes"]
            worker.waited = False
            return True
        if decision.action == "wait":
            if not worker.waited:
                worker.waited = True
                self._say_wait(worker, decision)
            return False
        if decision.action == "over_budget":
            self.pool.recorder.event(
                "budget_too_small", decision.message, data=decision.values, worker=worker
            )
            raise ConfigError(decision.message)
        rule = "budget" if decision.action == "recycle" else "budget_fewer_workers"
        self.pool.retire(worker, RecycleDecision(rule, decision.values, decision.message))
        return False

    def kill_over(self, budget: int) -> int:
        """The memory budget as a hard bound (sampler thread): when this sample of every worker tree
        sums over it, kill the worker :func:`choose_budget_kill` names at once; the loop records it,
        lowers the concurrency and runs its trial again. Returns the sum."""
        now = time.monotonic()
        with self.pool.lock:
            total = sum(w.cur_rss or 0 for w in self.pool.workers if w.state != "dead")
            # a worker already killed, or told to exit and being reaped, frees its memory anyway
            counted = [w for w in self.pool.workers if w.state not in ("dead", "exiting") and w.kill is None]
            candidates = [
                (w.worker_id, w.cur_rss or 0, None if w.trial is None else now - w.trial.started_mono)
                for w in counted
            ]
        choice = choose_budget_kill(budget, candidates)
        if choice is None:
            return total
        with self.pool.lock:
            worker = next(w for w in counted if w.worker_id == choice.worker_id)
            if worker.state in ("dead", "exiting") or worker.kill is not None:
                return total
            worker.kill = KillDecision("killed_budget", budget, choice.values["sum_bytes"], choice.message)
            worker.budget_kill = choice
        worker.handle.kill()
        logger.info("worker %d: %s", worker.worker_id, choice.message)
        return total

    def kill_over_gpu(self) -> None:
        """The GPU budget as a hard bound (sampler thread): on each GPU whose workers' GPU memory
        sums over its budget in this sample, kill the worker :func:`choose_budget_kill` names."""
        assert self.pool.gpu is not None
        with self.pool.lock:
            chosen = self.pool.gpu.kill_over(
                [w for w in self.pool.workers if w.state not in ("dead", "exiting")]
            )
        for worker, choice in chosen:
            worker.handle.kill()
            logger.info("worker %d: %s", worker.worker_id, choice.message)

    def after_kill(self, worker: WorkerRecord, choice: BudgetKill) -> None:
        """Fewer workers from now on after ``worker`` was killed at the budget (or, for a spare,
        no more replacements started early); each change recorded with its reason."""
        if self.pool.gpu is not None and "gpu" in choice.values:
            index = choice.values["gpu"]
            others = sum(
                1 for w in self.pool.live() if w is not worker and w.gpu_index == index and w.kill is None
            )
            change = self.pool.gpu.lower_after_kill(
                index,
                others,
                f"worker {worker.worker_id} was killed at GPU {index}'s memory budget (the workers' GPU memory "
                f"there summed {format_bytes(choice.values['sum_bytes'])}, budget {format_bytes(choice.values['budget_bytes'])})",
            )
            if change is not None:
                self.pool.recorder.event("workers", change.message, data=change.values, worker=worker)
            return
        budget = self.pool.planner.budget_bytes or 0
        if worker.spare:
            self.pool.no_prestart = True
            self.pool.recorder.event(
                "workers",
                f"no replacement is started early from now on: worker {worker.worker_id}, started early, "
                "was killed at the memory budget",
                data=choice.values,
                worker=worker,
            )
            return
        others = sum(1 for w in self.pool.live() if w is not worker and not w.spare and w.kill is None)
        change = self.pool.planner.lower_after_kill(
            others,
            f"worker {worker.worker_id} was killed at the memory budget (the workers' trees summed "
            f"{format_bytes(choice.values['sum_bytes'])}, budget {format_bytes(budget)})",
        )
        if change is not None:
            self.pool.recorder.event("workers", change.message, data=change.values, worker=worker)
