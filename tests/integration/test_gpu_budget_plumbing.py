"""The GPU budget's plumbing with real workers on a machine without a GPU: the configuration a
GPU machine's ``Runner(gpu_memory_budget=...)`` builds (two GPUs, torch capped) is given to a
Runner here, since NVML sees no GPU to build it from. Each worker is pinned to one GPU by UUID,
its Device settings carry its slot's torch cap and reach the worker's bootstrap, where the real
``apply_in_worker`` runs against CPU torch (which has no CUDA device to cap, and says so), and the
session records the GPU slots. What needs a GPU (NVML readings, growth, the kill) is in tests/gpu."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from _needs import needs
from trainguard import Runner
from trainguard.runner._gpu_config import GpuBudgetConfig, GpuBudgetDevice

needs("torch")

HERE = Path(__file__).parent
GB = 10**9
UUIDS = ("GPU-00000000-0000-0000-0000-00000000aaaa", "GPU-00000000-0000-0000-0000-00000000bbbb")


def test_each_worker_is_pinned_to_its_gpu_with_its_slots_torch_cap(tmp_path):
    config = GpuBudgetConfig(
        (GpuBudgetDevice(0, UUIDS[0], 60 * GB, 80 * GB), GpuBudgetDevice(1, UUIDS[1], 20 * GB, 40 * GB)),
        ("torch",),
    )
    params = [{"names": ["CUDA_VISIBLE_DEVICES"], "sleep_s": 0.3} for _ in range(4)]
    with Runner(workers=2, store=tmp_path / "g.db", preload=("torch",)) as runner:
        runner._config = dataclasses.replace(runner._config, gpu_budget=config)  # what NVML would have given
        results = runner.map(f"{HERE / 'runner_trials.py'}:env", params, name="gpu-plumbing")
        run_id = runner.store.get_run("gpu-plumbing").run_id
        workers = runner.store.workers(run_id)
        events = runner.store.events(run_id)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    seen = {r.value["env"]["CUDA_VISIBLE_DEVICES"] for r in results}
    assert seen == set(UUIDS)  # one slot a GPU until a GPU peak is measured: both GPUs used
    placed = {w.config["gpu"]: w.config for w in workers}
    assert placed[0]["gpu_caps"] == {"torch_memory_fraction": 0.75}
    assert placed[1]["gpu_caps"] == {"torch_memory_fraction": 0.5}
    assert placed[1]["CUDA_VISIBLE_DEVICES"] == UUIDS[1]
    devices = [e.data for e in events if e.kind == "device"]
    assert devices and all(
        d["torch"]["note"] == "no CUDA device visible to torch: nothing to configure" for d in devices
    )
    assert any(e.kind == "workers" and e.message.startswith("GPU budget: GPU 0: 1 slot") for e in events)
