"""GPU-only options where no GPU is seen (issue 35, item 5): the decision, over recorded facts."""

from __future__ import annotations

import warnings

import pytest

from trainguard.exceptions import NoGpuWarning
from trainguard.runner.device import Device
from trainguard.runner.gpu_presence import (
    GpuFacts,
    gpu_only_options,
    no_gpu_evidence,
    no_gpu_message,
    warn_gpu_options_without_gpu,
)

NO_DRIVER = GpuFacts("linux", None, "pynvml is installed but the NVML library cannot be loaded")


@pytest.mark.parametrize(
    ("facts", "needle"),
    [
        (NO_DRIVER, "NVML: pynvml is installed but the NVML library cannot be loaded"),
        (GpuFacts("linux", None, "nvidia-ml-py (pynvml) is not installed"), "pynvml) is not installed"),
        (GpuFacts("linux", 0, None), "NVML lists no GPU"),
        (GpuFacts("win32", 0, None), "NVML lists no GPU"),
    ],
)
def test_no_gpu_is_said_with_how_it_was_detected(facts, needle):
    evidence = no_gpu_evidence(facts)
    assert evidence is not None and needle in evidence


@pytest.mark.parametrize(
    "facts",
    [
        GpuFacts("linux", 1, None),
        # a driver's nodes without NVML (pynvml missing): a GPU may well be there
        GpuFacts("linux", None, "nvidia-ml-py (pynvml) is not installed", nvidia_devices=("/dev/nvidia0",)),
        GpuFacts("linux", None, "not installed", amd_devices=("/dev/kfd",)),  # ROCm builds use it
        GpuFacts("darwin", None, "not installed"),  # Metal GPUs: NVML cannot tell
        GpuFacts("win32", None, "not installed"),  # no device nodes to read: NVML must answer
    ],
)
def test_nothing_is_said_where_a_gpu_may_be_there(facts):
    assert no_gpu_evidence(facts) is None


def test_the_gpu_only_options_are_named_and_hiding_every_gpu_is_not_one():
    device = Device(tf_memory_growth=True, torch_memory_fraction=0.5, mixed_precision="mixed_float16")
    assert gpu_only_options(device, None) == ("tf_memory_growth", "torch_memory_fraction")
    assert gpu_only_options(Device(tf_memory_limit="2GB", jax_preallocate=False), [0]) == (
        "tf_memory_limit",
        "jax_preallocate",
        "gpus",
    )
    assert gpu_only_options(Device(visible_devices=""), "") == ()
    assert gpu_only_options(Device(mixed_precision="mixed_float16"), None) == ()


def test_the_message_names_the_options_as_the_caller_gave_them():
    api = no_gpu_message(("tf_memory_growth", "gpus"), "NVML lists no GPU")
    assert api.startswith("Device(tf_memory_growth=...) and gpus=...: these GPU options have no effect")
    cli = no_gpu_message(("tf_memory_limit",), "NVML lists no GPU", flags=True)
    assert cli.startswith(
        "--tf-memory-limit: this GPU option has no effect, no GPU is seen here (NVML lists no GPU)"
    )


def test_one_warning_and_none_without_gpu_options():
    with pytest.warns(NoGpuWarning) as caught:
        said = warn_gpu_options_without_gpu(Device(torch_memory_fraction=0.5), None, facts=NO_DRIVER)
    assert len(caught) == 1 and said is not None
    warning = caught[0].message
    assert warning.options == ("torch_memory_fraction",) and "NVML" in warning.evidence
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_gpu_options_without_gpu(None, None, facts=NO_DRIVER) is None
        assert (
            warn_gpu_options_without_gpu(
                Device(torch_memory_fraction=0.5), None, facts=GpuFacts("linux", 2, None)
            )
            is None
        )


def test_the_warning_survives_pickling():
    import pickle

    warning = NoGpuWarning("x", ("tf_memory_growth",), "NVML lists no GPU")
    back = pickle.loads(pickle.dumps(warning))
    assert (str(back), back.options, back.evidence) == ("x", ("tf_memory_growth",), "NVML lists no GPU")
