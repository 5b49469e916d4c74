"""Out-of-memory recovery and Device settings on a real NVIDIA GPU.

Skipped where no GPU is seen (conftest). Run them all with ``bash bench/gpu_check.sh``. Sizes are
chosen against caps set by the test (a torch memory fraction, a TensorFlow logical device limit, a
gpu_memory_limit), so they do not depend on the GPU's size beyond a few GiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip(f"torch {torch.__version__} sees no CUDA device", allow_module_level=True)

from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner import Device, Policy, Runner, Shrink  # noqa: E402

TRIALS = str(Path(__file__).parent / "oom_gpu_trials.py")
GIB = 2**30


def _cap_fraction(cap_bytes: int) -> float:
    return min(1.0, cap_bytes / torch.cuda.get_device_properties(0).total_memory)


def test_torch_out_of_memory_error_shrinks_in_fresh_workers_and_records_fragmentation(tmp_path):
    fraction = _cap_fraction(2 * GIB)  # torch may use about 2 GiB: 2 x 16 MiB x 64 samples fits, 128 not
    device = Device(visible_devices=[0], torch_memory_fraction=fraction)
    policy = Policy(on_oom=Shrink("batch_size", accumulate="grad_accum"), peak_ratio=None)
    with Runner(policy=policy, device=device, store=tmp_path / "t.db") as runner:
        (result,) = runner.map(
            f"{TRIALS}:torch_batch", [{"batch_size": 1024, "mib_per_sample": 16}], name="t"
        )
        (seen,) = runner.map(f"{TRIALS}:device_report", [{}], name="seen")
        store = runner.store
        run_id = store.get_run("t").run_id
        attempts = store.attempts(run_id)
        events = store.events(run_id)
    assert result.ok, result.error
    assert result.value["batch_size"] * result.value["grad_accum"] == 1024
    assert result.value["batch_size"] <= 64
    assert all(a.status == "framework_oom" and a.error.framework == "torch" for a in attempts[:-1])
    assert len({a.worker_id for a in attempts}) == len(attempts)  # never reused after an OOM
    (dev,) = [e for e in events if e.kind == "device"][:1]
    assert dev.data["torch"]["cuda_available"] is True
    if "memory_fraction" in dev.data["torch"]:
        assert dev.data["torch"]["memory_fraction"][0] == pytest.approx(fraction)
    if seen.value.get("torch_fraction") is not None:
        assert seen.value["torch_fraction"] == pytest.approx(fraction)  # asked inside the worker
    frag = [f for e in events if e.kind == "trial_stats" for f in e.data.get("fragmentation", [])]
    assert (
        frag
        and frag[-1]["framework"] == "torch"
        and frag[-1]["reserved_bytes"] >= frag[-1]["allocated_bytes"]
    )
    assert "inactive_split_bytes" in frag[-1]


def test_tensorflow_resource_exhausted_shrinks_under_a_logical_memory_limit(tmp_path):
    tf = pytest.importorskip("tensorflow")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow build sees no GPU")
    device = Device(visible_devices=[0], tf_memory_limit="2GiB")
    policy = Policy(on_oom=Shrink("batch_size"), peak_ratio=None)
    with Runner(policy=policy, device=device, store=tmp_path / "tf.db") as runner:
        (result,) = runner.map(f"{TRIALS}:tf_batch", [{"batch_size": 1024, "mib_per_sample": 16}], name="tf")
        run_id = runner.store.get_run("tf").run_id
        attempts = runner.store.attempts(run_id)
        events = runner.store.events(run_id)
    assert result.ok, result.error
    assert result.value["batch_size"] <= 128
    oom = [a for a in attempts if a.status == "framework_oom"]
    assert oom and all(a.error.framework == "tensorflow" for a in oom)
    assert "ResourceExhaustedError" in oom[0].error.message
    (dev,) = [e for e in events if e.kind == "device"][:1]
    assert dev.data["tensorflow"]["logical_memory_limit_mib"] == [[2048]]
    assert len(dev.data["tensorflow"]["logical_gpus"]) == 1
    frag = [f for e in events if e.kind == "trial_stats" for f in e.data.get("fragmentation", [])]
    assert any(f["framework"] == "tensorflow" and f["peak_bytes"] > 0 for f in frag)


def test_gpu_memory_limit_kill_shrinks_in_a_fresh_worker(tmp_path):
    pytest.importorskip("pynvml")
    policy = Policy(gpu_memory_limit="3GiB", on_oom=Shrink("batch_size"), peak_ratio=None)
    with Runner(policy=policy, store=tmp_path / "k.db", gpus=["0"]) as runner:
        (result,) = runner.map(f"{TRIALS}:torch_grow", [{"batch_size": 128}], name="k")
        attempts = runner.store.attempts(runner.store.get_run("k").run_id)
    # 128 x 64 MiB = 8 GiB and 64 x 64 MiB = 4 GiB cross 3 GiB; 32 x 64 MiB = 2 GiB fits
    assert result.ok and result.value["batch_size"] == 32, result
    assert [a.status for a in attempts] == ["killed_gpu_memory", "killed_gpu_memory", "ok"]


def test_device_settings_are_checked_inside_the_worker_and_bad_indices_refused(tmp_path):
    tf = pytest.importorskip("tensorflow")
    with pytest.raises(ConfigError, match="GPU index 99, which does not exist"):
        Runner(device=Device(visible_devices=[99]), store=None)
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow build sees no GPU")
    device = Device(visible_devices=[0], tf_memory_growth=True, torch_alloc_conf="expandable_segments:True")
    with Runner(device=device, store=tmp_path / "d.db") as runner:
        runner.map(f"{TRIALS}:device_report", [{}], name="d")
        events = runner.store.events(runner.store.get_run("d").run_id)
    (dev,) = [e for e in events if e.kind == "device"][:1]
    assert dev.data["tensorflow"]["memory_growth"] == [True]  # get_memory_growth, inside the worker
    assert dev.data["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
