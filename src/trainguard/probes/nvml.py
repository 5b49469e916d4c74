"""NVIDIA GPU probes through NVML (the ``nvidia-ml-py`` package, module ``pynvml``).

``pynvml`` is imported on first use, never at ``import trainguard``. Without the package, without
a driver, or without a GPU every probe answers "nothing" (``[]`` or ``None``), never an error:
a CPU machine is a normal machine. NVML is initialised once per process and left initialised
(``nvmlInit`` is reference-counted and cheap to keep).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, fields
from types import ModuleType

__all__ = [
    "GpuInfo",
    "nvml_available",
    "nvml_absence",
    "gpus",
    "gpu_memory_by_pid",
    "gpu_memory_of_pids",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as NVML reports it. ``index`` is NVML's (PCI order, not CUDA_VISIBLE_DEVICES')."""

    index: int
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    driver_version: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_LOCK = threading.Lock()
_STATE: dict[str, object] = {"tried": False, "module": None, "absence": None}


def _nvml() -> ModuleType | None:
    """The initialised pynvml module, or None when NVML cannot be used here."""
    with _LOCK:
        if not _STATE["tried"]:
            _STATE["tried"] = True
            try:
                import pynvml  # noqa: PLC0415 - optional, lazily imported
            except ImportError:
                _STATE["absence"] = "nvidia-ml-py (pynvml) is not installed: pip install -e '.[nvml]'"
                return None
            try:
                pynvml.nvmlInit()
                _STATE["module"] = pynvml
            except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded...
                logger.debug("NVML unavailable: %s", err)
                _STATE["absence"] = _absence_words(err)
                _STATE["module"] = None
        return _STATE["module"]  # type: ignore[return-value]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _absence_words(err: Exception) -> str:
    """Why ``nvmlInit`` failed, in words: pynvml's error class names the cause."""
    kind = type(err).__name__
    if "LibraryNotFound" in kind:
        return (
            "pynvml is installed but the NVML library (libnvidia-ml.so.1) cannot be loaded: no NVIDIA "
            "driver is visible to this process"
        )
    if "DriverNotLoaded" in kind:
        return "pynvml is installed but the NVIDIA driver is not loaded"
    if "NoPermission" in kind:
        return "pynvml is installed but may not open the NVIDIA devices (permissions)"
    return f"pynvml is installed but nvmlInit failed: {kind}: {err}"


def nvml_absence() -> str | None:
    """Why NVML cannot be used here, in one phrase (package missing, no driver...); None when it can."""
    return None if _nvml() is not None else str(_STATE["absence"] or "NVML did not initialise")


def nvml_available() -> bool:
    """True when NVML is installed, the driver answers, and it can be queried."""
    return _nvml() is not None


def gpus() -> list[GpuInfo]:
    """Every GPU NVML sees with its memory; [] without NVML, driver or GPU."""
    nv = _nvml()
    if nv is None:
        return []
    out: list[GpuInfo] = []
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
    except Exception:
        driver = None
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception as err:
        logger.debug("NVML device count failed: %s", err)
        return []
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            out.append(
                GpuInfo(
                    index=index,
                    name=_text(nv.nvmlDeviceGetName(handle)),
                    uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                    total_bytes=int(mem.total),
                    used_bytes=int(mem.used),
                    free_bytes=int(mem.free),
                    driver_version=driver,
                )
            )
        except Exception as err:  # one broken device (lost, MIG-only) must not hide the others
            logger.debug("NVML query of GPU %d failed: %s", index, err)
    return out


def gpu_memory_by_pid() -> dict[int, int] | None:
    """``{pid: bytes}`` used on all GPUs by each process NVML lists; None without NVML.

    Compute and graphics processes are both counted. In a container NVML may report host pids
    (or none at all without ``--pid=host``); a process whose usage NVML cannot read counts 0.
    """
    nv = _nvml()
    if nv is None:
        return None
    usage: dict[int, int] = {}
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception as err:
        logger.debug("NVML device count failed: %s", err)
        return {}
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            continue
        seen: set[int] = set()
        for getter_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            getter = getattr(nv, getter_name, None)
            if getter is None:
                continue
            try:
                procs = getter(handle)
            except Exception:
                continue
            for proc in procs:
                pid = int(proc.pid)
                # a process that is both compute and graphics appears twice on the same device
                if pid in seen:
                    continue
                seen.add(pid)
                used = getattr(proc, "usedGpuMemory", None)
                usage[pid] = usage.get(pid, 0) + (int(used) if isinstance(used, int) else 0)
    return usage


def gpu_memory_of_pids(pids: list[int] | tuple[int, ...]) -> int | None:
    """Bytes used on all GPUs by the given processes (a worker's tree); None without NVML."""
    usage = gpu_memory_by_pid()
    if usage is None:
        return None
    return sum(usage.get(pid, 0) for pid in pids)


def accounting_max_memory(pids: list[int] | tuple[int, ...]) -> int | None:
    """The exact GPU memory peak of the given processes from NVML's accounting
    (``nvmlDeviceGetAccountingStats(...).maxMemoryUsage``, summed over GPUs and processes), where
    accounting mode is on (``nvidia-smi -am 1``, as root); None without NVML, with accounting off,
    or when no GPU kept stats for these pids. Kept after a process ends, until the buffer wraps."""
    nv = _nvml()
    if nv is None or not pids:
        return None
    total, found = 0, False
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception as err:
        logger.debug("NVML device count failed: %s", err)
        return None
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            if nv.nvmlDeviceGetAccountingMode(handle) != getattr(nv, "NVML_FEATURE_ENABLED", 1):
                continue
        except Exception:
            continue
        for pid in pids:
            try:
                stats = nv.nvmlDeviceGetAccountingStats(handle, int(pid))
            except Exception:
                continue  # no stats for this pid on this GPU
            peak = getattr(stats, "maxMemoryUsage", None)
            if isinstance(peak, int):
                total += peak
                found = True
    return total if found else None
