"""The GPU memory budget of a run, per device, pure: how many worker slots each GPU gets, each
slot's share (what its frameworks are capped at), whether a trial may start on a device, and
which trial no device can hold.

The twin of :mod:`._budget` (the host's ``memory_budget``): a device starts with one slot; once a
fresh worker's first trial has a measured GPU peak, each device gets as many slots as fit its
budget with :data:`~._budget.BUDGET_HEADROOM` room each, and each slot's share is the budget over
its slots. A trial starts on a device only when its expected GPU peak (the high end of its
predicted interval, else the measured peaks) fits beside what the device's other workers hold or
are expected to reach; one whose predicted low end is over every device's whole budget is not
started at all. No NVML here: the session reads the devices and the samples, this module decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.runner.policy._budget import BUDGET_HEADROOM, BudgetDecision
from trainguard.runner.policy._peaks import PeakPrediction
from trainguard.units import format_bytes

__all__ = [
    "GpuSlots",
    "GpuPlan",
    "plan_gpu_slots",
    "slot_caps",
    "decide_gpu_trial",
    "gpu_refusal",
]


@dataclass(frozen=True, slots=True)
class GpuSlots:
    """One device's part of a :class:`GpuPlan`: ``slots`` workers at once, each capped at
    ``share_bytes`` (0 slots: one trial's measured peak is over the device's whole budget)."""

    index: int
    budget_bytes: int
    slots: int
    share_bytes: int
    message: str


@dataclass(frozen=True, slots=True)
class GpuPlan:
    """Every budgeted device's slots, and why."""

    devices: tuple[GpuSlots, ...]
    fresh_peak_bytes: int | None

    @property
    def total_slots(self) -> int:
        return sum(d.slots for d in self.devices)

    def device(self, index: int) -> GpuSlots:
        return next(d for d in self.devices if d.index == index)

    @property
    def message(self) -> str:
        return "; ".join(d.message for d in self.devices)

    def to_dict(self) -> dict[str, object]:
        return {
            "fresh_peak_bytes": self.fresh_peak_bytes,
            "devices": {
                str(d.index): {"budget_bytes": d.budget_bytes, "slots": d.slots, "share_bytes": d.share_bytes}
                for d in self.devices
            },
            "total_slots": self.total_slots,
        }


def _device_slots(budget: int, peak: float | None, cap: int | None) -> tuple[int, str]:
    """One device's slot count and the words for it."""
    if peak is None or peak <= 0:
        return 1, "1 slot until a trial's GPU peak is measured"
    if peak > budget:
        return 0, f"no slot: one trial's measured GPU peak {format_bytes(peak)} is over the budget"
    fit = budget / (peak * BUDGET_HEADROOM)
    slots = max(1, int(fit))
    why = (
        f"{format_bytes(budget)} / ({format_bytes(peak)} measured GPU peak of a fresh worker's trial x "
        f"{BUDGET_HEADROOM:g} room to grow) = {fit:.2f}"
    )
    if cap is not None and slots > cap:
        return cap, f"{cap} slot{'s' if cap != 1 else ''}: {why}, capped at {cap} after a kill at the budget"
    return slots, f"{slots} slot{'s' if slots != 1 else ''}: {why}"


def plan_gpu_slots(
    budgets: Mapping[int, int],
    *,
    fresh_peak_bytes: float | None,
    max_workers: int,
    caps: Mapping[int, int] | None = None,
) -> GpuPlan:
    """The slots of every device under its budget (``{gpu index: bytes}``).

    ``fresh_peak_bytes`` is the highest GPU peak measured of a fresh worker's first trial (None:
    none yet, one slot a device); ``caps`` the most slots a device keeps after a worker on it was
    killed at its budget. The slots of all devices together are at most ``max_workers``: the
    device with the most slots (the smaller share on a tie) gives one up first.
    """
    caps = caps or {}
    chosen = {i: _device_slots(b, fresh_peak_bytes, caps.get(i)) for i, b in sorted(budgets.items())}
    slots = {i: s for i, (s, _) in chosen.items()}
    words = {i: m for i, (_, m) in chosen.items()}
    while sum(slots.values()) > max(1, max_workers):
        index = max(slots, key=lambda i: (slots[i], -budgets[i] / max(1, slots[i]), -i))
        slots[index] -= 1
        words[index] = (
            f"{slots[index]} slot{'s' if slots[index] != 1 else ''} ({words[index]}; max workers {max_workers})"
        )
    devices = tuple(
        GpuSlots(
            i,
            int(budgets[i]),
            slots[i],
            int(budgets[i] // slots[i]) if slots[i] else 0,
            f"GPU {i}: {words[i]}" + (f", {format_bytes(budgets[i] // slots[i])} each" if slots[i] else ""),
        )
        for i in sorted(budgets)
    )
    return GpuPlan(devices, None if fresh_peak_bytes is None else int(fresh_peak_bytes))


#: the torch fraction is rounded down to this step, so a cap never rounds above its share
_FRACTION_STEP = 1e-4


def slot_caps(share_bytes: int, total_bytes: int, frameworks: Sequence[str]) -> dict[str, Any]:
    """What a worker in a slot of ``share_bytes`` on a GPU of ``total_bytes`` is told, as
    :class:`~trainguard.runner.device.Device` fields and environment: TensorFlow a logical device
    of its share (``tf_memory_limit``), PyTorch its share as a fraction of the device
    (``torch_memory_fraction``), JAX the same fraction (``XLA_PYTHON_CLIENT_MEM_FRACTION``), each
    only for the ``frameworks`` named."""
    fraction = max(_FRACTION_STEP, min(1.0, int(share_bytes / total_bytes / _FRACTION_STEP) * _FRACTION_STEP))
    caps: dict[str, Any] = {}
    if "tensorflow" in frameworks:
        caps["tf_memory_limit"] = int(share_bytes)
    if "torch" in frameworks:
        caps["torch_memory_fraction"] = round(fraction, 4)
    if "jax" in frameworks:
        caps["jax_memory_fraction"] = round(fraction, 4)
    return caps


def gpu_refusal(prediction: PeakPrediction, budgets: Mapping[int, int]) -> str | None:
    """Why a trial must not start on any device: the low end of its predicted GPU peak is over
    every device's whole budget (so a trial that may fit somewhere always runs). None: it may."""
    if not prediction.known or not budgets or prediction.low_bytes is None:
        return None
    largest = max(budgets.values())
    if prediction.low_bytes <= largest:
        return None
    where = (
        f"gpu_memory_budget={format_bytes(largest)}"
        if len(budgets) == 1
        else f"every GPU's budget (the largest, GPU {max(budgets, key=lambda i: budgets[i])}'s, is {format_bytes(largest)})"
    )
    return (
        f"not started: predicted GPU peak {format_bytes(prediction.peak_bytes)} (95 % interval "
        f"{format_bytes(prediction.low_bytes)} to {format_bytes(prediction.high_bytes)}) is over {where}; "
        f"{prediction.reason}"
    )


def decide_gpu_trial(
    device: GpuSlots,
    *,
    prediction: PeakPrediction | None,
    measured_bytes: float | None,
    others_bytes: float,
    others_busy: bool,
) -> BudgetDecision:
    """Whether an idle worker on ``device`` may start a trial under the device's budget.

    Args:
        device: the worker's device in the current plan.
        prediction: the trial's predicted GPU peak (None or unknown: ``measured_bytes`` sizes it).
        measured_bytes: the GPU peak measured of a trial like it (the worker's own latest, else a
            fresh worker's first); None: nothing measured yet.
        others_bytes: what the device's other workers hold or are expected to reach.
        others_busy: whether another worker on the device runs a trial (its end frees room).

    Returns ``"run"``, ``"other_device"`` (its predicted low end is over this device's budget: a
    larger device takes it), ``"wait"`` or ``"retire"`` (as :func:`~._budget.decide_budget`).
    """
    known = prediction is not None and prediction.known
    need = float(prediction.high_bytes or 0) if known and prediction is not None else measured_bytes
    values = {
        "gpu": device.index,
        "budget_bytes": device.budget_bytes,
        "expected_bytes": None if need is None else int(need),
        "others_bytes": int(others_bytes),
    }
    if known and prediction is not None and (prediction.low_bytes or 0) > device.budget_bytes:
        return BudgetDecision(
            "other_device",
            f"the trial's predicted GPU peak (at least {format_bytes(prediction.low_bytes)}) is over GPU "
            f"{device.index}'s budget {format_bytes(device.budget_bytes)}: left for a GPU with a larger one",
            values,
        )
    if need is None or need + others_bytes <= device.budget_bytes or others_bytes <= 0:
        return BudgetDecision("run", f"the trial fits GPU {device.index}'s budget", values)
    words = (
        f"the trial's GPU peak, expected at {format_bytes(need)}, does not fit beside the "
        f"{format_bytes(others_bytes)} the other workers on GPU {device.index} hold "
        f"(budget {format_bytes(device.budget_bytes)})"
    )
    if others_busy:
        return BudgetDecision("wait", f"{words}: waiting for one of them to finish", values)
    return BudgetDecision("retire", f"{words}: one worker fewer on it", values)
