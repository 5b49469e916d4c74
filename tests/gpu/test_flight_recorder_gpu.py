"""The flight recorder on a real NVIDIA GPU: Device(torch_memory_history=True) makes a CUDA
out-of-memory attempt dump PyTorch's memory snapshot, kept next to the store and named by the
attempt's flight recorder. Skipped where no GPU is seen (conftest); not run where this was built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip(f"torch {torch.__version__} sees no CUDA device", allow_module_level=True)

from trainguard.runner import Device, Policy, Runner  # noqa: E402
from trainguard.store import Store  # noqa: E402

TRIALS = str(Path(__file__).parent / "oom_gpu_trials.py")
GIB = 2**30


def test_a_cuda_oom_keeps_a_torch_memory_snapshot_in_its_flight_recorder(tmp_path):
    fraction = min(1.0, GIB / torch.cuda.get_device_properties(0).total_memory)
    device = Device(visible_devices=[0], torch_memory_fraction=fraction, torch_memory_history=True)
    db = tmp_path / "g.db"
    with Runner(policy=Policy(peak_ratio=None), device=device, store=db) as runner:
        (result,) = runner.map(f"{TRIALS}:torch_batch", [{"batch_size": 256, "mib_per_sample": 16}], name="g")
    assert result.status == "failed" and result.error.status == "framework_oom"
    with Store(db, readonly=True) as store:
        (attempt,) = store.attempts(store.get_run("g").run_id)
    recorder = attempt.error.flight_recorder
    assert recorder["cause"] == "framework_oom" and recorder["samples"]
    snapshot = recorder["torch_memory_snapshot"]
    assert snapshot.startswith(str(tmp_path / "g.db.snapshots")) and os.path.getsize(snapshot) > 0
