"""GPU-only options on a machine where no GPU is seen: said in one warning, never an error.

``Device(tf_memory_growth=True)``, ``Device(torch_memory_fraction=0.5)``, ``gpus=[0]`` and the other
GPU-only settings do nothing where the workers see no GPU. A run with them is not wrong (the same
script runs on a laptop and on the cluster), but silence leaves a user believing a GPU is
configured: :func:`warn_gpu_options_without_gpu` says which options have no effect and how the
absence was detected, once, when the ``Runner`` is made (before the first trial).

The decision (:func:`no_gpu_evidence`, :func:`gpu_only_options`) is pure over the facts read by
:func:`read_gpu_facts`, so it is tested for every combination without a GPU or a driver.
"""

from __future__ import annotations

import glob
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainguard._device_settings import GPU_ONLY_SETTINGS
from trainguard.exceptions import NoGpuWarning

if TYPE_CHECKING:
    from trainguard.runner.device import Device

__all__ = [
    "GpuFacts",
    "GPU_ONLY_FIELDS",
    "read_gpu_facts",
    "no_gpu_evidence",
    "gpu_only_options",
    "no_gpu_message",
    "warn_gpu_options_without_gpu",
]

#: The Device settings that act only on a GPU (``mixed_precision`` also runs on a CPU: not here).
GPU_ONLY_FIELDS = GPU_ONLY_SETTINGS


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What this machine shows of GPUs: the platform, NVML's GPU count (None: NVML unusable, with
    ``nvml_absence`` saying why), and the device nodes a GPU driver makes on Linux."""

    platform: str
    nvml_gpus: int | None
    nvml_absence: str | None
    nvidia_devices: tuple[str, ...] = ()
    amd_devices: tuple[str, ...] = ()


def read_gpu_facts() -> GpuFacts:
    """The facts on this machine: NVML's answer, ``/dev/nvidia<N>``, ``/proc/driver/nvidia/gpus``
    and ``/dev/kfd`` (ROCm: PyTorch and TensorFlow ROCm builds use AMD GPUs through it)."""
    from trainguard.probes import nvml

    count = len(nvml.gpus()) if nvml.nvml_available() else None
    nvidia = tuple(sorted(glob.glob("/dev/nvidia[0-9]*") + glob.glob("/proc/driver/nvidia/gpus/*")))
    amd = ("/dev/kfd",) if os.path.exists("/dev/kfd") else ()
    return GpuFacts(sys.platform, count, nvml.nvml_absence(), nvidia, amd)


def no_gpu_evidence(facts: GpuFacts) -> str | None:
    """How the absence of any GPU was detected, in words; None when a GPU is seen or where this
    cannot be told (macOS has Metal GPUs that NVML does not list; elsewhere without Linux's device
    nodes only NVML can say, and it must have answered)."""
    if facts.nvml_gpus:
        return None
    if facts.platform.startswith("linux"):
        if facts.nvidia_devices or facts.amd_devices:
            return None  # a driver's GPU nodes exist: a GPU NVML does not list (or AMD) may work
        nvml = "NVML lists no GPU" if facts.nvml_gpus == 0 else f"NVML: {facts.nvml_absence or 'not usable'}"
        return f"no /dev/nvidia<N> or /proc/driver/nvidia/gpus entry, no /dev/kfd (ROCm), {nvml}"
    if facts.platform == "win32" and facts.nvml_gpus == 0:
        return "NVML lists no GPU"
    return None


def gpu_only_options(device: Device | None, gpus: Sequence[str | int] | str | None) -> tuple[str, ...]:
    """The GPU-only settings given: ``Device`` fields by name, and ``gpus``. Hiding every GPU
    (``visible_devices=""``, ``gpus=""``) is not among them: it asks for no GPU, which is what there is."""
    names: list[str] = []
    if device is not None:
        for name in GPU_ONLY_FIELDS:
            value = getattr(device, name)
            if value is None or (name == "visible_devices" and value == ""):
                continue
            names.append(name)
    if gpus is not None and gpus != "" and list(gpus) != [""]:
        names.append("gpus")
    return tuple(names)


def no_gpu_message(options: Sequence[str], evidence: str, *, flags: bool = False) -> str:
    """One line: which options have no effect and why. ``flags``: name them as ``trainguard run``'s
    flags (``--tf-memory-growth``) instead of the Python keywords (``Device(tf_memory_growth=...)``)."""
    if flags:
        named = ", ".join("--" + name.replace("_", "-") for name in options)
    else:
        device = [n for n in options if n != "gpus"]
        parts = [f"Device({', '.join(f'{n}=...' for n in device)})"] if device else []
        parts += ["gpus=..."] if "gpus" in options else []
        named = " and ".join(parts)
    these = "this GPU option has" if len(options) == 1 else "these GPU options have"
    return f"{named}: {these} no effect, no GPU is seen here ({evidence}); the workers run on the CPU"


def warn_gpu_options_without_gpu(
    device: Device | None,
    gpus: Sequence[str | int] | str | None,
    *,
    facts: GpuFacts | None = None,
    stacklevel: int = 3,
) -> str | None:
    """Warn (:class:`~trainguard.exceptions.NoGpuWarning`) when GPU-only options are given and no
    GPU is seen; return the message, or None when there is nothing to say. The machine is read
    only when such an option is given."""
    options = gpu_only_options(device, gpus)
    if not options:
        return None
    evidence = no_gpu_evidence(facts if facts is not None else read_gpu_facts())
    if evidence is None:
        return None
    message = no_gpu_message(options, evidence)
    warnings.warn(NoGpuWarning(message, options, evidence), stacklevel=stacklevel)
    return message
