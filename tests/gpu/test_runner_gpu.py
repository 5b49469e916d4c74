"""The runner's GPU side against a real NVIDIA GPU: NVML memory by pid and the GPU memory limit.

Skipped where no GPU is seen (conftest); needs torch with CUDA in the environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("pynvml")
if not torch.cuda.is_available():
    # a GPU machine whose torch is a CPU build (or whose driver is too old for it): nothing to test
    pytest.skip(
        f"torch {torch.__version__} sees no CUDA device (a CPU build, or a driver it cannot use)",
        allow_module_level=True,
    )

from trainguard.runner import Policy, Runner  # noqa: E402

TRIALS = str(Path(__file__).parent / "runner_gpu_trials.py")


def test_gpu_memory_limit_kills_the_trial_and_names_the_cause(tmp_path):
    policy = Policy(gpu_memory_limit="2GiB", peak_ratio=None)
    with Runner(policy=policy, store=tmp_path / "g.db", gpus=["0"]) as runner:
        hog, small = runner.map(f"{TRIALS}:gpu_hog", [{"steps": 64}], name="gpu-hog") + runner.map(
            f"{TRIALS}:gpu_small", [{}], name="gpu-small"
        )
        workers = runner.store.workers(runner.store.get_run("gpu-hog").run_id)
        samples = runner.store.samples(runner.store.get_run("gpu-hog").run_id)
    assert hog.status == "failed" and hog.error.status == "killed_gpu_memory"
    assert hog.error.detail["gpu_bytes"] > 2 * 2**30
    assert workers[0].reason == "killed_gpu_memory"
    assert any((s.gpu_bytes or 0) > 0 for s in samples)  # NVML saw the worker's pid
    assert small.status == "ok"  # the run goes on in a fresh worker
