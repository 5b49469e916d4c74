"""``Runner(gpu_memory_budget=...)`` and ``trainguard run --gpu-memory-budget`` refuse bad input in
one line: against GPU records as NVML reports them, and, on a machine without an NVIDIA GPU (the
CPU test machines), with the real NVML answer: none is visible, and how to fix it."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.probes.nvml import GpuInfo, gpus
from trainguard.runner import Runner
from trainguard.runner._gpu_config import capped_frameworks, resolve_gpu_budget
from trainguard.runner.device import Device

GB = 10**9
SEEN = (
    GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-aaaa", 80 * GB, 0, 80 * GB),
    GpuInfo(1, "NVIDIA A100-SXM4-40GB", "GPU-bbbb", 40 * GB, 0, 40 * GB),
)


def _one_line(err: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_one_size_budgets_every_gpu_and_a_mapping_names_its_gpus():
    every = resolve_gpu_budget("30GB", seen=SEEN)
    assert every is not None and every.budgets == {0: 30 * GB, 1: 30 * GB}
    assert [d.uuid for d in every.devices] == ["GPU-aaaa", "GPU-bbbb"]
    named = resolve_gpu_budget({0: "70GB", "1": 40 * GB}, seen=SEEN, frameworks=("torch",))
    assert named is not None and named.budgets == {0: 70 * GB, 1: 40 * GB} and named.frameworks == ("torch",)
    listed = resolve_gpu_budget("20GB", seen=SEEN, gpus=[1])
    assert listed is not None and listed.budgets == {1: 20 * GB}
    assert resolve_gpu_budget(None, seen=()) is None


@pytest.mark.parametrize(
    ("value", "kwargs", "words"),
    [
        ("-5GB", {}, "is negative"),
        ("lots", {}, "is not a size"),
        (0, {}, "must be a size above 0"),
        ({0: "0GB"}, {}, "gpu_memory_budget[0]='0GB' must be a size above 0"),
        ({}, {}, "names no GPU"),
        ({"x": "1GB"}, {}, "key 'x' is not a GPU index"),
        ({True: "1GB"}, {}, "is not a GPU index"),
        ([0, 1], {}, "is not a size"),
        ({3: "10GB"}, {}, "GPU 3, which NVML does not list: this machine has 2 GPUs (indices 0, 1)"),
        ({1: "45GB"}, {}, "above its memory (37.3 GiB, NVIDIA A100-SXM4-40GB)"),
        ({0: "10GB"}, {"gpus": [0]}, "both name the GPUs"),
        ("10GB", {"gpus": ""}, "hides every GPU"),
        ("10GB", {"gpus": ["GPU-aaaa"]}, "needs gpus= as NVML indices"),
        ("10GB", {"backend": "ray"}, "with backend='ray'"),
        ("10GB", {"device": Device(visible_devices=[0])}, "drop visible_devices"),
        ("10GB", {"device": Device(torch_memory_fraction=0.5)}, "drop torch_memory_fraction"),
        ("10GB", {"device": Device(tf_memory_limit="4GB")}, "drop tf_memory_limit"),
        (
            "10GB",
            {"device": Device(tf_memory_growth=True), "frameworks": ("tensorflow",)},
            "drop Device(tf_memory_growth=True)",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line(value, kwargs, words):
    with pytest.raises(ConfigError) as err:
        resolve_gpu_budget(value, seen=SEEN, **kwargs)
    assert words in _one_line(err)


def test_memory_growth_is_fine_when_tensorflow_is_not_capped():
    config = resolve_gpu_budget(
        "10GB", seen=SEEN, device=Device(tf_memory_growth=True), frameworks=("torch",)
    )
    assert config is not None


def test_the_capped_frameworks_are_the_ones_the_workers_are_said_to_use():
    assert capped_frameworks(None, (), None) == ()
    assert capped_frameworks("torch", (), None) == ("torch",)
    assert capped_frameworks(None, ("tensorflow.keras", "numpy"), None) == ("tensorflow",)
    assert capped_frameworks("jax", ("torch",), Device(torch_alloc_conf="expandable_segments:True")) == (
        "torch",
        "jax",
    )


needs_no_gpu = pytest.mark.skipif(
    bool(gpus()), reason="NVML sees a GPU here: the no-GPU answer cannot be seen"
)


@needs_no_gpu
def test_without_any_gpu_visible_the_runner_says_so_and_how_to_fix_it():
    with pytest.raises(ConfigError) as err:
        Runner(gpu_memory_budget="70GB", store=None)
    text = _one_line(err)
    assert "needs an NVIDIA GPU that NVML can read, and none is visible here" in text
    assert "drop gpu_memory_budget" in text
    with pytest.raises(ConfigError, match="is negative"):  # a bad size is said before NVML is asked
        Runner(gpu_memory_budget="-1GB", store=None)


@needs_no_gpu
def test_the_cli_refuses_the_budget_in_one_line(tmp_path, capsys):
    from trainguard.cli import main

    params = tmp_path / "p.json"
    params.write_text('[{"x": 1}]')
    argv = [
        "run",
        "tests.unit.test_gpu_budget_config:test_one_size_budgets_every_gpu_and_a_mapping_names_its_gpus",
    ]
    code = main(
        [*argv, "--params", str(params), "--store", str(tmp_path / "s.db"), "--gpu-memory-budget", "0=70GB"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "none is visible here" in err
    with pytest.raises(SystemExit) as usage:  # argparse's own usage error
        main(
            [
                *argv,
                "--params",
                str(params),
                "--store",
                str(tmp_path / "s.db"),
                "--gpu-memory-budget",
                "0=,1=4GB",
            ]
        )
    assert usage.value.code == 2 and "'0=' is not INDEX=SIZE" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()
