"""``Runner(gpu_memory_budget=...)`` checked: which GPUs are budgeted, how much each, and which
frameworks each worker slot's share caps. Every bad value is a one-line :class:`ConfigError`
before any worker starts; the GPUs are the ones NVML sees (:func:`trainguard.probes.nvml.gpus`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import ConfigError
from trainguard.units import format_bytes, parse_size

if TYPE_CHECKING:
    from trainguard.probes.nvml import GpuInfo
    from trainguard.runner.device import Device

__all__ = [
    "GpuBudgetConfig",
    "GpuBudgetDevice",
    "check_gpu_budget",
    "resolve_gpu_budget",
    "capped_frameworks",
]

#: the frameworks a slot's share can cap (through Device's settings)
CAPPABLE = ("torch", "tensorflow", "jax")
_EXAMPLE = "such as '70GB' (each GPU) or {0: '70GB', 1: '40GB'}"


@dataclass(frozen=True, slots=True)
class GpuBudgetDevice:
    """One budgeted GPU: NVML's index and UUID (workers are pinned by UUID, which no device
    ordering can change), its budget and its whole memory."""

    index: int
    uuid: str
    budget_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class GpuBudgetConfig:
    """The checked GPU budget: the devices, and the frameworks each slot's share caps (none:
    only the NVML bound holds the budget)."""

    devices: tuple[GpuBudgetDevice, ...]
    frameworks: tuple[str, ...] = ()
    #: the user's Device, which each slot's settings start from (its GPU and caps added)
    base_device: Device | None = None

    @property
    def budgets(self) -> dict[int, int]:
        return {d.index: d.budget_bytes for d in self.devices}

    def device(self, index: int) -> GpuBudgetDevice:
        return next(d for d in self.devices if d.index == index)

    def stored(self) -> dict[str, Any]:
        return {"budgets": {str(i): b for i, b in self.budgets.items()}, "frameworks": list(self.frameworks)}


def capped_frameworks(
    keras_backend: str | None, preload: Sequence[str], device: Device | None
) -> tuple[str, ...]:
    """The frameworks the workers are said to use (``keras_backend``, ``preload``, a ``Device``
    setting): the ones a slot's share is set in."""
    named = {keras_backend} if keras_backend else set()
    named.update(name.split(".")[0] for name in preload)
    if device is not None:
        named.update(device.frameworks())
    return tuple(f for f in CAPPABLE if f in named)


def _parse(value: Any) -> dict[int | None, int]:
    """``{gpu index or None (every GPU): bytes}``, each size above 0."""
    if isinstance(value, Mapping):
        if not value:
            raise ConfigError(f"gpu_memory_budget={{}} names no GPU: give a size {_EXAMPLE}")
        entries: dict[int | None, Any] = {}
        for key, size in value.items():
            index = key if isinstance(key, int) and not isinstance(key, bool) else None
            if isinstance(key, str) and key.strip().isdigit():
                index = int(key)
            if index is None or index < 0:
                raise ConfigError(
                    f"gpu_memory_budget key {key!r} is not a GPU index: use whole numbers, {_EXAMPLE}"
                )
            entries[index] = size
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        entries = {None: value}
    else:
        raise ConfigError(f"gpu_memory_budget={value!r} is not a size: give a size {_EXAMPLE}")
    out: dict[int | None, int] = {}
    for index, size in entries.items():
        name = "gpu_memory_budget" if index is None else f"gpu_memory_budget[{index}]"
        parsed = parse_size(size, name=name)
        if parsed <= 0:
            raise ConfigError(f"{name}={size!r} must be a size above 0, {_EXAMPLE}")
        out[index] = parsed
    return out


def _refuse_conflicts(gpus: Any, device: Device | None, frameworks: tuple[str, ...], backend: Any) -> None:
    if backend != "local":
        raise ConfigError(
            f"gpu_memory_budget= sizes a run to this machine's GPUs; with backend={backend!r} give each "
            "slot its GPU (RayBackend(resources=...), SlurmBackend(gpus_per_worker=...)) and "
            "Policy(gpu_memory_limit=...) per trial"
        )
    if device is None:
        return
    if device.visible_devices is not None:
        raise ConfigError(
            "gpu_memory_budget= and Device(visible_devices=) both place the workers on GPUs: give the GPUs "
            "as gpu_memory_budget={0: '70GB', ...} (or gpus=[0, 1]) and drop visible_devices"
        )
    for name in ("tf_memory_limit", "torch_memory_fraction", "jax_memory_fraction"):
        if getattr(device, name) is not None:
            raise ConfigError(
                f"gpu_memory_budget= sets Device {name} from each worker slot's share: drop {name}"
            )
    if device.tf_memory_growth and "tensorflow" in frameworks:
        raise ConfigError(
            "gpu_memory_budget= caps TensorFlow with a logical device of each slot's share, which TensorFlow "
            "refuses with memory growth: drop Device(tf_memory_growth=True)"
        )


def _devices_named(parsed: dict[int | None, int], gpus: Any, seen: Sequence[GpuInfo]) -> dict[int, int]:
    """``{gpu index: bytes}``: a dict's own indices, else one size for each of ``gpus=`` or every GPU."""
    if None not in parsed:
        if gpus is not None:
            raise ConfigError(
                "gpus= and gpu_memory_budget={index: size} both name the GPUs: give them once (drop gpus=)"
            )
        return {i: b for i, b in parsed.items() if i is not None}
    if gpus is None:
        return {g.index: parsed[None] for g in seen}
    entries = (
        [e.strip() for e in gpus.split(",")] if isinstance(gpus, str) else [str(g).strip() for g in gpus]
    )
    if not [e for e in entries if e]:
        raise ConfigError(
            "gpu_memory_budget= with gpus='' hides every GPU: give the GPUs to budget, e.g. gpus=[0]"
        )
    if not all(e.isdigit() for e in entries):
        raise ConfigError(f"gpu_memory_budget= needs gpus= as NVML indices such as [0, 1], not {gpus!r}")
    return {int(e): parsed[None] for e in entries}


def resolve_gpu_budget(
    value: Any,
    *,
    seen: Sequence[GpuInfo],
    gpus: Any = None,
    device: Device | None = None,
    backend: Any = "local",
    frameworks: tuple[str, ...] = (),
) -> GpuBudgetConfig | None:
    """The checked budget against the GPUs ``seen`` (NVML's list); None for ``value`` None.

    Raises:
        ConfigError: not a size or mapping of sizes, a size not above 0, another backend, a
            conflicting ``gpus=``/``Device`` setting, no GPU visible, an index NVML does not list,
            a budget above its GPU's memory.
    """
    if value is None:
        return None
    parsed = _parse(value)
    _refuse_conflicts(gpus, device, frameworks, backend)
    if not seen:
        raise ConfigError(
            "gpu_memory_budget= needs an NVIDIA GPU that NVML can read, and none is visible here "
            "(no GPU, no driver, or no nvidia-ml-py: pip install -e '.[nvml]'): run on a GPU machine or "
            "drop gpu_memory_budget (memory_budget= holds the host memory)"
        )
    budgets = _devices_named(parsed, gpus, seen)
    by_index = {g.index: g for g in seen}
    devices = []
    for index, budget in sorted(budgets.items()):
        gpu = by_index.get(index)
        if gpu is None:
            count = len(seen)
            raise ConfigError(
                f"gpu_memory_budget names GPU {index}, which NVML does not list: this machine has {count} "
                f"GPU{'s' if count != 1 else ''} (indices {', '.join(str(i) for i in sorted(by_index))})"
            )
        if budget > gpu.total_bytes:
            raise ConfigError(
                f"gpu_memory_budget for GPU {index} ({format_bytes(budget)}) is above its memory "
                f"({format_bytes(gpu.total_bytes)}, {gpu.name}): give at most that"
            )
        devices.append(GpuBudgetDevice(index, gpu.uuid, budget, gpu.total_bytes))
    return GpuBudgetConfig(tuple(devices), frameworks, device)


def check_gpu_budget(
    value: Any,
    *,
    gpus: Any,
    device: Device | None,
    backend: Any,
    keras_backend: str | None,
    preload: Sequence[str],
) -> GpuBudgetConfig | None:
    """:func:`resolve_gpu_budget` against the GPUs NVML sees now (NVML is read only when a budget
    is given)."""
    if value is None:
        return None
    from trainguard.probes.nvml import gpus as nvml_gpus

    _parse(value)  # a bad size is said before NVML is asked anything
    frameworks = capped_frameworks(keras_backend, preload, device)
    return resolve_gpu_budget(
        value, seen=nvml_gpus(), gpus=gpus, device=device, backend=backend, frameworks=frameworks
    )
