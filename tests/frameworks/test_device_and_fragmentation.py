"""Device settings applied and read back inside the worker, fragmentation figures in the record,
mixed precision as an out-of-memory step: real TensorFlow, Keras and PyTorch on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from _needs import needs

needs("tensorflow")
needs("keras")
needs("torch")

from trainguard.cli import main  # noqa: E402
from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner import Device, Policy, Runner, Shrink  # noqa: E402

OOM_TRIALS = str(Path(__file__).parent.parent / "integration" / "oom_trials.py")
DEVICE_TRIAL = str(Path(__file__).with_name("device_trials.py")) + ":view_then_allocate"


@pytest.fixture(scope="module")
def device_run(tmp_path_factory):
    """One worker with the device settings and TensorFlow's BFC allocator on the CPU: it reads its
    settings back, then allocates (each TensorFlow worker costs about 10 CPU seconds to start)."""
    device = Device(
        visible_devices="",
        tf_memory_growth=True,
        torch_memory_fraction=0.5,
        torch_alloc_conf="expandable_segments:True",
        mixed_precision="mixed_float16",
    )
    store = tmp_path_factory.mktemp("device") / "d.db"
    with Runner(
        device=device, store=store, keras_backend="tensorflow", env={"TF_CPU_ALLOCATOR_USE_BFC": "true"}
    ) as runner:
        (result,) = runner.map(DEVICE_TRIAL, [{"n": 1500}], name="frag")
        events = runner.store.events(runner.store.get_run("frag").run_id)
    return store, result, events


def test_device_settings_reach_the_worker_before_the_frameworks_and_are_read_back(device_run):
    _, result, events = device_run
    assert result.ok, result.error
    assert result.value["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert result.value["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert result.value["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert result.value["policy"] == "mixed_float16"  # set at bootstrap, before the trial built anything
    (event,) = [e for e in events if e.kind == "device"]
    report = event.data
    # asked from inside the worker: TensorFlow sees no GPU (none visible), torch no CUDA, Keras the policy
    assert report["tensorflow"]["physical_gpus"] == [] and report["tensorflow"]["logical_gpus"] == []
    assert "no GPU visible" in report["tensorflow"]["note"]
    assert report["torch"]["cuda_available"] is False
    assert report["keras"]["global_policy"] == "mixed_float16"
    assert report["env"]["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: Device(visible_devices=[0]), "GPU index 0, which does not exist"),
        (lambda: Device(visible_devices="0,7"), "which does not exist"),
        (lambda: Device(tf_memory_growth=True, tf_memory_limit="1GB"), "cannot both be set"),
        (lambda: Device(torch_memory_fraction=1.5), "fraction in (0, 1]"),
        (lambda: Device(visible_devices="gpu zero"), "not a GPU index"),
        (lambda: Device(mixed_precision="half"), "not a Keras dtype policy"),
        (lambda: Device(torch_alloc_conf="expandable"), "expandable_segments:True"),
    ],
)
def test_bad_device_settings_are_one_line_before_any_worker(make, needle):
    from trainguard.probes.nvml import gpus

    if "does not exist" in needle and gpus():
        pytest.skip("this machine has GPUs; the check is against their count")
    with pytest.raises(ConfigError) as info:
        Runner(device=make(), store=None)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_settings_for_a_framework_that_is_not_installed_are_refused():
    if importlib.util.find_spec("jax") is not None:
        pytest.skip("jax is installed here")
    with pytest.raises(ConfigError, match="needs jax, which is not installed"):
        Runner(device=Device(jax_preallocate=False), store=None)


def test_run_cli_device_flags(tmp_path, capsys):
    import json

    params = tmp_path / "p.json"
    params.write_text("[{}]")
    base = ["run", f"{OOM_TRIALS}:env_view", "--params", str(params), "--store", str(tmp_path / "c.db")]
    code = main([*base, "--visible-devices", "", "--torch-alloc-conf", "expandable_segments:True", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (
        code == 0
        and out["results"][0]["value"]["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    )
    if not importlib.util.find_spec("jax"):
        assert main([*base, "--jax-memory-fraction", "0.5"]) == 2
        assert "needs jax" in capsys.readouterr().err


def test_tensorflow_peak_against_in_use_is_recorded_and_shown(device_run, capsys):
    store, result, events = device_run
    assert result.ok, result.error
    (stats,) = [e for e in events if e.kind == "trial_stats"]
    (tf_row,) = [f for f in stats.data["fragmentation"] if f["framework"] == "tensorflow"]
    # two 1500 x 1500 float32 tensors (9 MB each) were alive at once, then freed
    assert tf_row["device"] == "CPU:0" and tf_row["peak_bytes"] >= 2 * 1500 * 1500 * 4
    assert tf_row["current_bytes"] < tf_row["peak_bytes"]
    assert main(["show", "frag", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "fragmentation" in out and "CPU:0" in out


def test_mixed_precision_is_an_opt_in_oom_step_before_shrinking(tmp_path):
    policy = Policy(on_oom=Shrink("batch_size", mixed_precision=True), peak_ratio=None)
    # the numpy backend: Keras's dtype policy without a TensorFlow import in each fresh worker
    # (Keras on numpy starts in about 5.7 CPU seconds, on torch in about 11: torch._dynamo)
    with Runner(policy=policy, store=tmp_path / "m.db", keras_backend="numpy") as runner:
        (result,) = runner.map(f"{OOM_TRIALS}:keras_policy", [{"batch_size": 64}], name="mp")
        events = runner.store.events(runner.store.get_run("mp").run_id)
    assert result.ok and result.attempts == 2
    assert result.value == {"policy": "mixed_float16", "batch_size": 64}  # same size, mixed precision
    assert any(e.kind == "oom_shrink" and "mixed_float16" in e.message for e in events)
