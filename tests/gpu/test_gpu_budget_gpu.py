"""``Runner(gpu_memory_budget=...)`` against a real NVIDIA GPU and a CUDA build of torch: a sweep
packed into slots on GPU 0 never crosses the budget, each worker's torch is capped at its slot's
share, and a trial predicted over the whole budget is not started (or cannot cross it).

Skipped where no GPU is seen (conftest); this path has not run on the project's CPU machines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("pynvml")
if not torch.cuda.is_available():
    pytest.skip(
        f"torch {torch.__version__} sees no CUDA device (a CPU build, or a driver it cannot use)",
        allow_module_level=True,
    )

from trainguard.probes.nvml import gpus  # noqa: E402
from trainguard.runner import Policy, Runner  # noqa: E402

TRIALS = str(Path(__file__).parent / "runner_gpu_trials.py")
GIB = 2**30
BUDGET = 6 * GIB


def _overlap(workers) -> int:
    """The most workers alive at once (from their start and end times)."""
    edges = sorted([(w.started_at, 1) for w in workers] + [(w.ended_at or float("inf"), -1) for w in workers])
    live = most = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


def test_a_torch_sweep_under_the_gpu_budget_is_packed_and_never_crosses_it(tmp_path):
    total = gpus()[0].total_bytes
    params = [{"mib": 512, "hold_s": 1.5} for _ in range(12)]
    with Runner(
        workers=4,
        store=tmp_path / "g.db",
        gpu_memory_budget={0: BUDGET},
        preload=("torch",),
        policy=Policy(peak_ratio=None),
    ) as runner:
        results = runner.map(f"{TRIALS}:gpu_hold", params, name="gpu-budget")
        run_id = runner.store.get_run("gpu-budget").run_id
        workers = runner.store.workers(run_id)
        events = runner.store.events(run_id)
        attempts = runner.store.attempts(run_id)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    # the NVML bound kills at the first sample whose sum crosses the budget: none did
    assert not [a for a in attempts if a.status == "killed_budget"]
    assert not [w for w in workers if w.reason == "killed_budget"]
    # measured peaks under the budget: more than one slot on the GPU, each peak under its share
    placed = [w.config for w in workers if w.config.get("gpu") == 0]
    assert placed and max(p["gpu_share_bytes"] for p in placed) == BUDGET  # one slot until measured
    shares = [p["gpu_share_bytes"] for p in placed]
    assert min(shares) < BUDGET and _overlap(workers) > 1
    assert all(0 < (r.peak_gpu_bytes or 0) <= min(shares) for r in results[1:])
    # each worker's torch reports the fraction its share is of the GPU
    # (torch's get_per_process_memory_fraction, where this torch has it)
    reported = [
        f
        for e in events
        if e.kind == "device"
        for f in (e.data or {}).get("torch", {}).get("memory_fraction") or ()
    ]
    expected = {round(p["gpu_caps"]["torch_memory_fraction"], 4) for p in placed}
    assert {round(f, 4) for f in reported} <= expected
    assert all(f * total <= BUDGET for f in reported)


def test_a_trial_predicted_over_the_gpu_budget_does_not_cross_it(tmp_path):
    sizes = [256, 384, 512, 640, 768, 896, 1024]
    params = [{"mib": m, "hold_s": 0.3} for m in sizes] + [{"mib": 16 * 1024, "hold_s": 0.3}]
    with Runner(
        workers=1, store=tmp_path / "g.db", gpu_memory_budget="4GiB", gpus=[0], preload=("torch",)
    ) as runner:
        results = runner.map(f"{TRIALS}:gpu_hold", params, name="gpu-too-big")
    big = results[-1]
    assert all(r.ok for r in results[:-1])
    assert not big.ok
    # refused by the GPU peak model, or (its interval too wide to act on) stopped by torch's cap
    # at the slot's share, or by the NVML bound: never run past the budget
    assert big.error.status in ("predicted_over_limit", "framework_oom", "killed_budget"), big.error
    if big.error.status == "predicted_over_limit":
        assert "over gpu_memory_budget=4.0 GiB" in big.error.message
