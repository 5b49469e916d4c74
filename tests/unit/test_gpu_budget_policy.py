"""The GPU memory budget's decisions per device, on recorded numbers (no process, no NVML): slots
from the measured GPU peaks, each slot's share and framework caps, admission by predicted and
measured GPU peaks, the refusal of a trial too big for every GPU, and the pool's GPU owner."""

from __future__ import annotations

import pytest

from trainguard.runner.policy._budget import BUDGET_HEADROOM, choose_budget_kill
from trainguard.runner.policy._gpu_budget import (
    GpuSlots,
    decide_gpu_trial,
    gpu_refusal,
    plan_gpu_slots,
    slot_caps,
)
from trainguard.runner.policy._peaks import PeakPrediction

GB = 10**9
GIB = 2**30


def test_one_slot_a_gpu_until_a_gpu_peak_is_measured():
    plan = plan_gpu_slots({0: 70 * GB, 1: 40 * GB}, fresh_peak_bytes=None, max_workers=8)
    assert [(d.index, d.slots, d.share_bytes) for d in plan.devices] == [(0, 1, 70 * GB), (1, 1, 40 * GB)]
    assert "until a trial's GPU peak is measured" in plan.message


def test_each_gpu_holds_as_many_measured_peaks_as_fit_with_room():
    plan = plan_gpu_slots({0: 70 * GB, 1: 40 * GB}, fresh_peak_bytes=10 * GB, max_workers=16)
    slots = {d.index: d.slots for d in plan.devices}
    assert slots == {0: int(70 / (10 * BUDGET_HEADROOM)), 1: int(40 / (10 * BUDGET_HEADROOM))} == {0: 6, 1: 3}
    assert plan.device(0).share_bytes == 70 * GB // 6
    assert plan.total_slots == 9
    assert "GPU 0: 6 slots" in plan.message and "GPU 1: 3 slots" in plan.message


@pytest.mark.parametrize("peak_gb", [0.3, 1, 4.9, 9, 17, 33, 39.9])
def test_the_slots_never_cross_a_gpus_budget_with_the_measured_peak(peak_gb):
    budgets = {0: 80 * GB, 1: 40 * GB, 2: 24 * GB}
    plan = plan_gpu_slots(budgets, fresh_peak_bytes=peak_gb * GB, max_workers=64)
    for device in plan.devices:
        if device.slots > 1:  # one slot runs even when its room to grow does not fit
            assert device.slots * peak_gb * GB * BUDGET_HEADROOM <= budgets[device.index]
        assert device.slots * device.share_bytes <= budgets[device.index]
        assert device.share_bytes >= peak_gb * GB or device.slots == 0


def test_slots_grow_with_a_smaller_peak_and_shrink_with_a_larger_one():
    budgets = {0: 48 * GB}
    small = plan_gpu_slots(budgets, fresh_peak_bytes=4 * GB, max_workers=32).device(0).slots
    large = plan_gpu_slots(budgets, fresh_peak_bytes=20 * GB, max_workers=32).device(0).slots
    assert (small, large) == (10, 2)


def test_a_gpu_smaller_than_one_measured_trial_gets_no_slot_and_says_so():
    plan = plan_gpu_slots({0: 70 * GB, 1: 12 * GB}, fresh_peak_bytes=16 * GB, max_workers=8)
    assert plan.device(1).slots == 0 and plan.device(1).share_bytes == 0
    assert "over the budget" in plan.device(1).message
    assert plan.device(0).slots == 3


def test_max_workers_caps_every_gpu_together_taking_from_the_fullest_first():
    plan = plan_gpu_slots({0: 70 * GB, 1: 40 * GB}, fresh_peak_bytes=10 * GB, max_workers=4)
    assert plan.total_slots == 4
    assert {d.index: d.slots for d in plan.devices} == {0: 2, 1: 2}
    assert "max workers 4" in plan.message


def test_a_cap_after_a_kill_holds_a_gpu_below_what_the_peak_would_allow():
    plan = plan_gpu_slots({0: 70 * GB}, fresh_peak_bytes=10 * GB, max_workers=16, caps={0: 2})
    assert plan.device(0).slots == 2
    assert "capped at 2 after a kill" in plan.message


def test_caps_are_each_slots_share_in_each_named_frameworks_terms():
    caps = slot_caps(35 * GB, 80 * GB, ("torch", "tensorflow", "jax"))
    assert caps["tf_memory_limit"] == 35 * GB
    assert caps["torch_memory_fraction"] == pytest.approx(0.4375)
    assert caps["torch_memory_fraction"] * 80 * GB <= 35 * GB  # rounded down, never above the share
    assert caps["jax_memory_fraction"] == caps["torch_memory_fraction"]
    assert slot_caps(35 * GB, 80 * GB, ("torch",)) == {"torch_memory_fraction": caps["torch_memory_fraction"]}
    assert slot_caps(35 * GB, 80 * GB, ()) == {}
    odd = slot_caps(10 * GB, 3 * 10 * GB + 7, ("torch",))["torch_memory_fraction"]
    assert odd * (3 * 10 * GB + 7) <= 10 * GB


def _device(budget: int = 40 * GB, slots: int = 3) -> GpuSlots:
    return GpuSlots(0, budget, slots, budget // slots, "")


def _predicted(low: float, peak: float, high: float) -> PeakPrediction:
    return PeakPrediction(int(peak), int(low), int(high), "peak ~ k x batch^1.00 (8 trials)", 8)


def test_a_trial_starts_when_its_measured_peak_fits_beside_the_others():
    d = decide_gpu_trial(
        _device(), prediction=None, measured_bytes=10 * GB, others_bytes=25 * GB, others_busy=True
    )
    assert d.action == "run"
    d = decide_gpu_trial(
        _device(), prediction=None, measured_bytes=10 * GB, others_bytes=35 * GB, others_busy=True
    )
    assert d.action == "wait" and "waiting for one of them to finish" in d.message


def test_a_predicted_peak_sizes_the_trial_instead_of_the_measured_one():
    big = _predicted(18 * GB, 20 * GB, 22 * GB)
    d = decide_gpu_trial(
        _device(), prediction=big, measured_bytes=5 * GB, others_bytes=20 * GB, others_busy=True
    )
    assert d.action == "wait" and d.values["expected_bytes"] == 22 * GB  # the interval's high end
    small = _predicted(2 * GB, 3 * GB, 4 * GB)
    d = decide_gpu_trial(
        _device(), prediction=small, measured_bytes=30 * GB, others_bytes=20 * GB, others_busy=True
    )
    assert d.action == "run"
    unknown = PeakPrediction.unknown("too few trials")
    d = decide_gpu_trial(
        _device(), prediction=unknown, measured_bytes=30 * GB, others_bytes=20 * GB, others_busy=True
    )
    assert d.action == "wait"  # an unknown prediction leaves the measured peak to size it


def test_with_idle_workers_holding_the_room_one_worker_fewer():
    d = decide_gpu_trial(
        _device(), prediction=None, measured_bytes=10 * GB, others_bytes=35 * GB, others_busy=False
    )
    assert d.action == "retire" and "one worker fewer" in d.message


def test_a_trial_alone_on_its_gpu_runs_when_it_may_fit():
    d = decide_gpu_trial(
        _device(),
        prediction=_predicted(30 * GB, 38 * GB, 46 * GB),
        measured_bytes=None,
        others_bytes=0,
        others_busy=False,
    )
    assert d.action == "run"


def test_a_trial_over_this_gpus_budget_is_left_for_a_larger_gpu():
    d = decide_gpu_trial(
        _device(40 * GB),
        prediction=_predicted(50 * GB, 55 * GB, 60 * GB),
        measured_bytes=None,
        others_bytes=0,
        others_busy=False,
    )
    assert d.action == "other_device" and "left for a GPU with a larger one" in d.message
    assert gpu_refusal(_predicted(50 * GB, 55 * GB, 60 * GB), {0: 70 * GB, 1: 40 * GB}) is None


def test_a_trial_whose_predicted_low_end_is_over_every_gpus_budget_is_refused_in_words():
    too_big = _predicted(75 * GB, 80 * GB, 85 * GB)
    message = gpu_refusal(too_big, {0: 70 * GB, 1: 40 * GB})
    assert message is not None and message.startswith("not started: predicted GPU peak")
    assert "the largest, GPU 0's, is 65.2 GiB" in message and "batch^1.00" in message
    one = gpu_refusal(too_big, {0: 70 * GB})
    assert one is not None and "gpu_memory_budget=65.2 GiB" in one
    # only the low end counts: a trial that may fit always runs
    assert gpu_refusal(_predicted(60 * GB, 72 * GB, 90 * GB), {0: 70 * GB}) is None
    assert gpu_refusal(PeakPrediction.unknown("too few trials"), {0: 1}) is None


def test_the_kill_at_a_gpus_budget_names_the_gpu_and_what_was_summed():
    kill = choose_budget_kill(
        40 * GB,
        [(0, 22 * GB, 30.0), (1, 21 * GB, 2.0)],
        budget_name="GPU 1's memory budget",
        summed="the workers' GPU memory on it",
    )
    assert kill is not None and kill.worker_id == 1  # its trial started last
    assert kill.message.startswith("killed at GPU 1's memory budget: the workers' GPU memory on it summed")
