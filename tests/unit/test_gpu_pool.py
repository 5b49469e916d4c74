"""The pool's GPU owner under a GPU budget, on worker records and recorded GPU peaks (no process,
no NVML): where a new worker goes, the Device settings its slot's share gives it, growth after a
fresh worker's measured GPU peak, admission, the recycle of a worker capped for a larger share,
the refusal of a trial too big for every GPU, and the kill when a GPU's workers sum over its budget."""

from __future__ import annotations

from typing import Any

from trainguard.runner._gpu_config import GpuBudgetConfig, GpuBudgetDevice
from trainguard.runner.session._gpu_pool import GpuPool, framework_gpu_peak
from trainguard.runner.session._records import Attempt, WorkerRecord

GB = 10**9


def _config(frameworks: tuple[str, ...] = ("torch",)) -> GpuBudgetConfig:
    return GpuBudgetConfig(
        (GpuBudgetDevice(0, "GPU-aaaa", 70 * GB, 80 * GB), GpuBudgetDevice(1, "GPU-bbbb", 40 * GB, 48 * GB)),
        frameworks,
    )


def _worker(worker_id: int, gpu: int, *, share: int, state: str = "idle", gpu_now: int = 0) -> WorkerRecord:
    handle: Any = None  # the owner never touches the process
    return WorkerRecord(
        worker_id, worker_id, handle, 0.0, state=state, gpu_index=gpu, gpu_share_bytes=share, cur_gpu=gpu_now
    )


def _run(index: int, batch: int) -> Attempt:
    return Attempt(index, {"batch": batch}, 1, 1)


def test_a_new_worker_goes_where_most_slots_are_free_and_none_past_the_slots():
    pool = GpuPool(_config(), max_workers=8, predict_peaks=False)
    assert pool.free_device([]) == 0
    first = [_worker(0, 0, share=70 * GB)]
    assert pool.free_device(first) == 1
    assert pool.free_device([*first, _worker(1, 1, share=40 * GB)]) is None  # one slot each until measured


def test_a_slot_pins_its_worker_by_uuid_and_caps_torch_at_its_share_through_device():
    pool = GpuPool(_config(("torch", "tensorflow")), max_workers=8, predict_peaks=False)
    env: dict[str, str] = {}
    bootstrap: dict[str, Any] = {"device": None}
    placed = pool.place(1, env, bootstrap)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"
    settings = bootstrap["device"]
    assert settings["torch_memory_fraction"] == round(
        40 / 48 - 0.00005, 4
    )  # its share of the device, rounded down
    assert settings["tf_memory_limit"] == 40 * GB
    assert settings["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"
    assert placed == {
        "gpu": 1,
        "gpu_share_bytes": 40 * GB,
        "gpu_caps": {k: settings[k] for k in placed["gpu_caps"]},
    }


def test_a_user_device_setting_is_kept_beside_the_slots_caps():
    from trainguard.runner.device import Device

    config = GpuBudgetConfig(
        _config().devices, ("torch",), Device(torch_alloc_conf="expandable_segments:True")
    )
    env: dict[str, str] = {}
    bootstrap: dict[str, Any] = {}
    GpuPool(config, max_workers=2, predict_peaks=False).place(0, env, bootstrap)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert bootstrap["device"]["torch_memory_fraction"] == 0.875


def test_a_fresh_workers_gpu_peak_grows_the_slots_and_a_worker_capped_larger_is_recycled():
    pool = GpuPool(_config(), max_workers=16, predict_peaks=False)
    worker = _worker(0, 0, share=70 * GB)
    worker.trials_done = 1
    worker.trial_peak_gpu = 9 * GB
    plan = pool.trial_ended(worker, {"batch": 64}, {"torch_cuda_peak_bytes": 10 * GB})
    assert plan is not None and plan.fresh_peak_bytes == 10 * GB  # the framework's peak was the higher
    assert {d.index: d.slots for d in plan.devices} == {0: 6, 1: 3}
    decision = pool.admit(worker, _run(1, 64), [worker])
    assert decision.action == "recycle" and "a slot there has 10.9 GiB now" in decision.message
    fresh = _worker(1, 0, share=pool.plan.device(0).share_bytes)
    assert pool.admit(fresh, _run(1, 64), [fresh]).action == "run"
    assert pool.free_device([fresh]) == 0


def test_without_a_framework_cap_the_share_starts_no_recycle():
    pool = GpuPool(_config(()), max_workers=16, predict_peaks=False)
    worker = _worker(0, 0, share=70 * GB)
    worker.trials_done = 1
    worker.trial_peak_gpu = 10 * GB
    pool.trial_ended(worker, {"batch": 64}, {})
    assert pool.admit(worker, _run(1, 64), [worker]).action == "run"


def test_admission_counts_what_the_other_workers_on_the_same_gpu_hold():
    pool = GpuPool(_config(), max_workers=16, predict_peaks=False)
    pool.fresh_peaks = [10 * GB]
    pool.replan()
    share = pool.plan.device(1).share_bytes
    me = _worker(0, 1, share=share)
    me.gpu_last_peak = 12 * GB
    busy = _worker(1, 1, share=share, state="busy", gpu_now=14 * GB)
    busy.gpu_reserved_bytes = 15 * GB
    elsewhere = _worker(2, 0, share=share, state="busy", gpu_now=60 * GB)
    decision = pool.admit(me, _run(3, 64), [me, busy, elsewhere])
    assert decision.action == "run" and decision.values["others_bytes"] == 15 * GB
    crowded = _worker(3, 1, share=share, state="busy", gpu_now=20 * GB)
    assert pool.admit(me, _run(3, 64), [me, busy, crowded]).action == "wait"


def test_the_gpu_peak_model_refuses_a_trial_too_big_for_every_gpu():
    pool = GpuPool(_config(), max_workers=8, predict_peaks=True)
    worker = _worker(0, 0, share=70 * GB)
    for i, batch in enumerate((8, 16, 24, 32, 48, 64, 96, 128)):
        worker.trials_done = i + 1
        worker.trial_peak_gpu = int(GB + batch * 0.25 * GB)
        pool.trial_ended(worker, {"batch": batch}, {})
    refused = pool.refusal(_run(20, 1024))
    assert refused is not None and refused.status == "predicted_over_limit"
    assert "is over every GPU's budget" in refused.message
    assert pool.refusal(_run(21, 64)) is None


def test_a_gpu_whose_workers_sum_over_its_budget_loses_one_and_keeps_fewer_slots():
    pool = GpuPool(_config(), max_workers=16, predict_peaks=False)
    pool.fresh_peaks = [10 * GB]
    pool.replan()
    first, second = (
        _worker(0, 1, share=1, state="busy", gpu_now=22 * GB),
        _worker(1, 1, share=1, state="busy", gpu_now=21 * GB),
    )
    other = _worker(2, 0, share=1, state="busy", gpu_now=69 * GB)
    first.trial = _run(0, 64)
    second.trial = _run(1, 64)
    second.trial.started_mono = 1e12  # started last
    killed = pool.kill_over([first, second, other])
    assert [(w.worker_id, c.values["gpu"]) for w, c in killed] == [(1, 1)]
    assert second.kill is not None and second.kill.status == "killed_budget"
    assert "GPU 1's memory budget" in second.kill.message
    change = pool.lower_after_kill(1, 1, "a kill")
    assert change is not None and pool.plan.device(1).slots == 1 and pool.plan.device(0).slots == 6


def test_the_framework_peak_reads_torch_and_tensorflows_gpu_devices_only():
    stats = {
        "torch_cuda_peak_bytes": 3 * GB,
        "fragmentation": [
            {"framework": "tensorflow", "device": "GPU:0", "peak_bytes": 5 * GB},
            {"framework": "tensorflow", "device": "CPU:0", "peak_bytes": 9 * GB},
        ],
    }
    assert framework_gpu_peak(stats) == 5 * GB
    assert framework_gpu_peak({}) is None


def test_a_trial_too_big_for_its_gpu_waits_for_a_larger_one_only_where_one_has_a_slot():
    pool = GpuPool(_config(), max_workers=8, predict_peaks=True)
    trained = _worker(9, 0, share=70 * GB)
    for i, batch in enumerate((8, 16, 24, 32, 48, 64, 96, 128)):
        trained.trials_done = i + 1
        trained.trial_peak_gpu = int(GB + batch * 0.08 * GB)
        pool.trial_ended(trained, {"batch": batch}, {})
    run = _run(7, 560)  # predicted near 46 GB: over GPU 1's 40 GB, under GPU 0's 70 GB
    prediction = pool.predict(run.sent_params)
    assert prediction is not None and 40 * GB < (prediction.low_bytes or 0) < 70 * GB
    small = _worker(0, 1, share=pool.plan.device(1).share_bytes)
    assert pool.admit(small, run, [small]).action == "other_device"
    pool.caps[0] = 0  # GPU 0 left without a slot: nothing larger can take it, so it runs here
    pool.replan()
    assert pool.plan.device(0).slots == 0
    small.gpu_share_bytes = pool.plan.device(1).share_bytes
    assert pool.admit(small, run, [small]).action == "run"


def test_no_slot_on_any_gpu_stops_the_run_in_words():
    import pytest

    from trainguard.exceptions import ConfigError

    pool = GpuPool(_config(), max_workers=8, predict_peaks=False)
    worker = _worker(0, 0, share=70 * GB)
    worker.trials_done = 1
    worker.trial_peak_gpu = 75 * GB
    with pytest.raises(ConfigError, match="below one trial's measured GPU peak 69.8 GiB on every GPU"):
        pool.trial_ended(worker, {"batch": 64}, {})
