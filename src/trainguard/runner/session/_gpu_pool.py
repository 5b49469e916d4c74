"""The GPU side of the pool under ``Runner(gpu_memory_budget=...)``: which device each worker
slot is on, each slot's share and the framework caps set from it, the GPU peaks that size the
slots, the GPU peak model, and the kill when a device's workers together cross its budget.

The decisions are :mod:`trainguard.runner.policy._gpu_budget` (pure); this owner keeps state: the
current plan, the measured GPU peaks of fresh workers' first trials, each device's cap after a
kill, and a :class:`~trainguard.runner.session._predict.PeakForecaster` fitted on GPU peaks. A
worker's GPU memory is what the sampler reads of its tree through NVML (one device per worker, so
it is that device's); a trial's measured GPU peak is the highest of those samples and, where the
worker reports them, the framework's own peak (torch's ``max_memory_allocated``, TensorFlow's
``get_memory_info`` peak).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import ConfigError
from trainguard.outcomes import Failure
from trainguard.runner.policy._budget import BudgetDecision, BudgetKill, choose_budget_kill
from trainguard.runner.policy._gpu_budget import (
    GpuPlan,
    decide_gpu_trial,
    gpu_refusal,
    plan_gpu_slots,
    slot_caps,
)
from trainguard.runner.policy._limits import KillDecision
from trainguard.runner.policy._peaks import PeakPrediction
from trainguard.runner.session._predict import PeakForecaster
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner._gpu_config import GpuBudgetConfig
    from trainguard.runner.session._records import WorkerRecord

__all__ = ["GpuPool", "framework_gpu_peak"]


def framework_gpu_peak(stats: dict[str, Any]) -> int | None:
    """The GPU peak a worker's frameworks reported for its trial (torch's and TensorFlow's
    allocator peaks on GPU devices), or None."""
    peaks = [int(stats.get("torch_cuda_peak_bytes") or 0)]
    for row in stats.get("fragmentation") or ():
        if row.get("framework") == "tensorflow" and "GPU" in str(row.get("device")):
            peaks.append(int(row.get("peak_bytes") or 0))
    return max(peaks) or None


class GpuPool:
    """One session's GPU budget (see the module docstring). Read by the loop's thread and, for
    the kill, the sampler's, which holds the pool's lock around the worker fields it reads."""

    def __init__(self, config: GpuBudgetConfig, *, max_workers: int, predict_peaks: bool) -> None:
        self.config = config
        self.max_workers = max_workers
        self.fresh_peaks: list[int] = []
        self.caps: dict[int, int] = {}
        self.plan: GpuPlan = self._plan()
        self.forecaster = PeakForecaster() if predict_peaks else None

    def _plan(self) -> GpuPlan:
        return plan_gpu_slots(
            self.config.budgets,
            fresh_peak_bytes=max(self.fresh_peaks) if self.fresh_peaks else None,
            max_workers=self.max_workers,
            caps=self.caps,
        )

    def replan(self) -> GpuPlan | None:
        """The plan again; returned when a device's slots changed."""
        previous, self.plan = self.plan, self._plan()
        changed = [d.slots for d in previous.devices] != [d.slots for d in self.plan.devices]
        return self.plan if changed else None

    # -- placing workers ---------------------------------------------------------------------------

    @staticmethod
    def _on(index: int, workers: Sequence[WorkerRecord]) -> list[WorkerRecord]:
        return [w for w in workers if w.gpu_index == index and w.state not in ("dead", "exiting")]

    def free_device(self, workers: Sequence[WorkerRecord]) -> int | None:
        """The device a new worker goes on: the one with the most free slots whose workers leave
        room for a fresh worker's measured trial (None: none has)."""
        fresh = max(self.fresh_peaks) if self.fresh_peaks else None
        free: dict[int, int] = {}
        for device in self.plan.devices:
            on = self._on(device.index, workers)
            if device.slots <= len(on):
                continue
            if on and fresh is not None and sum(self.holds(w) for w in on) + fresh > device.budget_bytes:
                continue
            free[device.index] = device.slots - len(on)
        return max(free, key=lambda i: (free[i], -i), default=None)

    def place(self, index: int, env: dict[str, str], bootstrap: dict[str, Any]) -> dict[str, Any]:
        """Pin a new worker to GPU ``index`` with its slot's caps, through the Device settings
        the worker applies before any framework touches the GPU; returns what is recorded."""
        from trainguard.runner.device import Device

        gpu = self.config.device(index)
        share = self.plan.device(index).share_bytes
        caps = slot_caps(share, gpu.total_bytes, self.config.frameworks)
        slot_device = dataclasses.replace(
            self.config.base_device or Device(), visible_devices=gpu.uuid, **caps
        )
        env.update(slot_device.env())
        bootstrap["device"] = slot_device.worker_settings()
        return {"gpu": index, "gpu_share_bytes": share, "gpu_caps": caps}

    # -- starting a trial ----------------------------------------------------------------------------

    def predict(self, params: Any, key: int | None = None) -> PeakPrediction | None:
        if self.forecaster is None:
            return None
        return self.forecaster.predict(params, key=key, refit=False)

    def refusal(self, run: Any) -> Failure | None:
        """A trial no device can hold, by its predicted GPU peak: its failure, else None."""
        if run.attempt != 1 or run.attempt_params is not None:
            return None  # one already under way runs again as it is
        prediction = self.predict(run.sent_params, run.index)
        message = None if prediction is None else gpu_refusal(prediction, self.config.budgets)
        if message is None or prediction is None:
            return None
        return Failure("predicted_over_limit", message, prediction=prediction.to_dict())

    def holds(self, worker: WorkerRecord) -> float:
        """What a worker holds or is expected to reach on its GPU."""
        current = float(worker.cur_gpu or 0)
        if worker.state == "busy":
            return max(float(worker.gpu_reserved_bytes or 0), current, float(worker.trial_peak_gpu or 0))
        if worker.trials_done == 0 and self.fresh_peaks:
            return max(current, float(max(self.fresh_peaks)))
        return current

    def admit(self, worker: WorkerRecord, run: Any, workers: Sequence[WorkerRecord]) -> BudgetDecision:
        """Whether ``worker`` may start ``run`` on its GPU now: ``"recycle"`` first when its caps
        were set for a larger share than its slot has now, else :func:`decide_gpu_trial`."""
        index = worker.gpu_index
        assert index is not None
        device = self.plan.device(index)
        # without a framework cap the share is only the admission's: nothing to start again for
        if self.config.frameworks and (worker.gpu_share_bytes or 0) > device.share_bytes > 0:
            return BudgetDecision(
                "recycle",
                f"its GPU {index} caps were set for a {format_bytes(worker.gpu_share_bytes)} share; a slot "
                f"there has {format_bytes(device.share_bytes)} now ({device.message})",
                {"gpu": index, "share_bytes": worker.gpu_share_bytes, "slot_share_bytes": device.share_bytes},
            )
        others = [w for w in self._on(index, workers) if w is not worker]
        measured = worker.gpu_last_peak or (max(self.fresh_peaks) if self.fresh_peaks else None)
        prediction = self.predict(run.sent_params, None if run.attempt_params is not None else run.index)
        decision = decide_gpu_trial(
            device,
            prediction=prediction,
            measured_bytes=measured,
            others_bytes=sum(self.holds(w) for w in others),
            others_busy=any(w.state == "busy" for w in others),
        )
        if decision.action == "other_device" and not self._larger_slot(index, prediction):
            # no other GPU with a slot can take it either (a retry, or a GPU left with no slot): it
            # runs here, where the framework cap and the NVML bound hold it
            decision = BudgetDecision("run", decision.message, decision.values)
        if decision.action == "run":
            worker.gpu_reserved_bytes = decision.values["expected_bytes"]
        return decision

    def _larger_slot(self, index: int, prediction: PeakPrediction | None) -> bool:
        low = (prediction.low_bytes or 0) if prediction is not None else 0
        return any(d.index != index and d.slots > 0 and d.budget_bytes >= low for d in self.plan.devices)

    # -- after a trial -------------------------------------------------------------------------------

    def trial_ended(self, worker: WorkerRecord, params: Any, stats: dict[str, Any]) -> GpuPlan | None:
        """A good trial's GPU peak: fed to the model and, for a fresh worker's first, to the plan
        (returned when it changed)."""
        peak = max(int(worker.trial_peak_gpu or 0), int(framework_gpu_peak(stats) or 0))
        worker.gpu_reserved_bytes = None
        if peak <= 0:
            return None
        worker.gpu_last_peak = peak
        if self.forecaster is not None:
            self.forecaster.observe(params, peak)
            self.forecaster.model()
        if worker.trials_done != 1:
            return None
        self.fresh_peaks.append(peak)
        change = self.replan()
        if self.plan.total_slots == 0:
            raise ConfigError(
                f"gpu_memory_budget is below one trial's measured GPU peak {format_bytes(peak)} on every GPU "
                f"({self.plan.message}): raise it above that (or make the trial smaller)"
            )
        if change is None and len(self.fresh_peaks) == 1:
            return self.plan  # the first measurement is always recorded, even when it changes nothing
        return change

    # -- the hard bound --------------------------------------------------------------------------------

    def kill_over(self, workers: Sequence[WorkerRecord]) -> list[tuple[WorkerRecord, BudgetKill]]:
        """Sampler thread, under the pool's lock: the worker to kill on each device whose workers'
        GPU memory sums over its budget (marked killed here; the caller ends them)."""
        now = time.monotonic()
        out = []
        for device in self.config.devices:
            counted = [w for w in self._on(device.index, workers) if w.kill is None]
            candidates = [
                (w.worker_id, int(w.cur_gpu or 0), None if w.trial is None else now - w.trial.started_mono)
                for w in counted
            ]
            choice = choose_budget_kill(
                device.budget_bytes,
                candidates,
                budget_name=f"GPU {device.index}'s memory budget",
                summed="the workers' GPU memory on it",
            )
            if choice is None:
                continue
            worker = next(w for w in counted if w.worker_id == choice.worker_id)
            choice = BudgetKill(
                choice.worker_id, choice.alone, choice.message, {**choice.values, "gpu": device.index}
            )
            worker.kill = KillDecision(
                "killed_budget", device.budget_bytes, choice.values["sum_bytes"], choice.message
            )
            worker.budget_kill = choice
            out.append((worker, choice))
        return out

    def lower_after_kill(self, index: int, others: int, why: str) -> BudgetDecision | None:
        """A worker on GPU ``index`` was killed at its budget with ``others`` still running trials
        there: at most that many slots (at least 1) from now on."""
        slots = max(1, min(others, self.plan.device(index).slots))
        self.caps[index] = min(self.caps.get(index, slots), slots)
        change = self.replan()
        if change is None:
            return None
        return BudgetDecision(
            "workers",
            f"GPU {index}: {self.plan.device(index).slots} slot(s) from now on: {why}",
            {**change.to_dict(), "cap": self.caps[index]},
        )
