"""``trainguard doctor``: the environment, and what in it is known to leak or to waste memory.

:func:`diagnose` reads everything without importing a framework (versions come from package
metadata, the Keras backend from ``KERAS_BACKEND``/``keras.json``, GPUs from NVML), so it takes
well under two seconds; ``deep=True`` imports the installed frameworks to ask them about their
devices and settings. Each warning says what to do instead.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trainguard._envvars import MEMORY_VARIABLES, THREAD_VARIABLES
from trainguard.probes.allocator import detect_allocator

__all__ = ["DoctorReport", "diagnose", "THREAD_VARIABLES", "MEMORY_VARIABLES", "detect_allocator"]


def _copied(value: Any) -> Any:
    """A dict or list as a new one (so the caller may change it), anything else as it is."""
    return type(value)(value) if isinstance(value, (dict, list)) else value


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """What :func:`diagnose` found. ``to_dict()`` is what ``trainguard doctor --json`` prints."""

    python: str
    python_executable: str
    os: str
    cpus: int
    cpus_usable: int
    cpu_quota: float | None
    memory_total_bytes: int
    memory_available_bytes: int
    swap_total_bytes: int
    cgroup_version: int | None
    cgroup_limit_bytes: int | None
    cgroup_usage_bytes: int | None
    frameworks: dict[str, str | None]
    keras_backend: str | None
    nvml_available: bool
    gpus: list[dict[str, Any]]
    allocator: str
    threads: dict[str, str | None]
    environment: dict[str, str | None]
    warnings: list[str]
    deep: dict[str, Any] | None = None
    elapsed_s: float = 0.0
    #: the process tier workers get here, its guarantees (exact or approximate), what is missing
    process: dict[str, Any] | None = None
    #: the cgroup hierarchies mounted: "v1", "v2", "hybrid" (v1 controllers beside a v2 tree) or None
    cgroup_layout: str | None = None
    #: the folder the memory figures were read from
    cgroup_memory_path: str | None = None
    #: why NVML cannot be used here (None: it can)
    nvml_absence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field by its name, in field order; dicts and lists copied (one level down)."""
        return {f.name: _copied(getattr(self, f.name)) for f in fields(self)}


def cgroup_layout(mountinfo: str) -> str | None:
    """``"v1"``, ``"v2"`` or ``"hybrid"`` from ``/proc/self/mountinfo``'s file system types; None
    when no cgroup is mounted (or the text is not mountinfo)."""
    kinds = {row.partition(" - ")[2].split(" ", 1)[0] for row in mountinfo.splitlines()}
    v1, v2 = "cgroup" in kinds, "cgroup2" in kinds
    return "hybrid" if v1 and v2 else "v1" if v1 else "v2" if v2 else None


def _read_layout() -> str | None:
    try:
        return cgroup_layout(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return None


def _cpu_v1_dir() -> Path:
    """This process's v1 ``cpu`` controller folder (its own cgroup, not the hierarchy's root)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(","):
                own = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
                return own if own.is_dir() else Path("/sys/fs/cgroup/cpu")
    except (OSError, ValueError):
        pass
    return Path("/sys/fs/cgroup/cpu")


def _cpu_quota(cgroup_path: str | None) -> float | None:
    # cgroup v2 cpu.max: "max 100000" or "200000 100000" (quota period)
    candidates = []
    if cgroup_path:
        candidates.append(Path(cgroup_path) / "cpu.max")
    candidates.append(Path("/sys/fs/cgroup/cpu.max"))
    for path in candidates:
        try:
            quota, period = path.read_text().split()[:2]
        except (OSError, ValueError):
            continue
        if quota == "max":
            return None
        try:
            return int(quota) / int(period)
        except (ValueError, ZeroDivisionError):
            return None
    try:  # v1
        folder = _cpu_v1_dir()
        quota_us = int((folder / "cpu.cfs_quota_us").read_text())
        period_us = int((folder / "cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 else None
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _warnings(r: dict[str, Any]) -> list[str]:
    """What the report says to change, each with what to do instead: frameworks, GPUs, the host."""
    return [*_framework_warnings(r), *_gpu_warnings(r), *_host_warnings(r)]


def _framework_warnings(r: dict[str, Any]) -> Iterator[str]:
    """What the installed frameworks and their settings call for (Keras graphs, threads)."""
    fw = r["frameworks"]
    keras_version = fw.get("keras")
    keras_major = int(keras_version.split(".")[0]) if keras_version and keras_version[0].isdigit() else None
    usable = r["cpus_usable"]
    if (
        keras_major is not None
        and keras_major >= 3
        and r["keras_backend"] == "tensorflow"
        and fw.get("tensorflow")
    ):
        yield (
            "Keras 3 on the TensorFlow backend keeps each fit's traced graphs (TensorFlow's gradient "
            "registry holds them through the optimizer's tf.custom_gradient): the process grows "
            "tens of MB per repeated build+fit even after clear_session() and gc.collect(). "
            "Instead: run trials in trainguard workers (trainguard run / trainguard.Runner release "
            "them after each trial), call trainguard.frameworks.cleanup() or use trainguard.scope() "
            "between fits in your own loop, or set KERAS_BACKEND=torch."
        )
    if keras_major is not None and keras_major < 3 and fw.get("tensorflow"):
        yield (
            "Keras 2 (tf.keras) accumulates graph state across models: call "
            "tf.keras.backend.clear_session() between trials, or run them in recycled workers (trainguard run)."
        )
    if fw.get("torch") or fw.get("tensorflow") or fw.get("jax"):
        unset = [v for v in ("OMP_NUM_THREADS",) if not r["threads"].get(v)]
        if unset and usable >= 2:
            yield (
                f"OMP_NUM_THREADS is unset: every process uses all {usable} cores, so several workers "
                "oversubscribe the CPU (10-20x slower fits measured with 2 workers). Instead: let "
                "trainguard run give each worker cores/workers threads (its default), or set "
                "OMP_NUM_THREADS=<cores per worker>."
            )


def _gpu_warnings(r: dict[str, Any]) -> Iterator[str]:
    """What each framework's GPU memory habits call for, where there are GPUs."""
    fw = r["frameworks"]
    gpus = r["gpus"]
    deep = r.get("deep") or {}
    if fw.get("tensorflow") and gpus:
        growth = deep.get("tensorflow_memory_growth")
        env_growth = (r["environment"].get("TF_FORCE_GPU_ALLOW_GROWTH") or "").lower() == "true"
        if not env_growth and (growth is None or not all(growth.values())):
            yield (
                "TensorFlow reserves nearly all GPU memory when it starts (no memory growth), so a second "
                "worker or framework on the GPU fails with OOM. Instead: set TF_FORCE_GPU_ALLOW_GROWTH=true, "
                "or tf.config.experimental.set_memory_growth(gpu, True) before first use."
            )
    if (
        fw.get("jax")
        and gpus
        and (r["environment"].get("XLA_PYTHON_CLIENT_PREALLOCATE") or "").lower() != "false"
    ):
        yield (
            "JAX preallocates 75% of GPU memory at start. Instead: set XLA_PYTHON_CLIENT_PREALLOCATE=false "
            "or XLA_PYTHON_CLIENT_MEM_FRACTION=<share per worker>."
        )
    if fw.get("torch") and gpus and not r["environment"].get("PYTORCH_CUDA_ALLOC_CONF"):
        yield (
            "PyTorch's CUDA caching allocator fragments when tensor sizes vary between trials. Instead: set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (and scope() empties the cache between trials)."
        )


def _host_warnings(r: dict[str, Any]) -> Iterator[str]:
    """What the machine calls for: its memory limit, swap, free memory, allocator and cores."""
    usable = r["cpus_usable"]
    deep = r.get("deep") or {}
    if r["cgroup_limit_bytes"] is None:
        yield (
            "No memory limit on this process's cgroup: a leak grows until the kernel's OOM killer ends some "
            "process without warning. Instead: give trainguard a limit (trainguard run --memory-limit, "
            "Policy(memory_limit=...)) so it recycles the worker first, or run in a container with --memory."
        )
    if r["swap_total_bytes"] == 0:
        yield (
            "No swap: when RAM runs out the OOM killer ends the largest process at once. Instead: set "
            "Policy(memory_limit=..., recycle_above=...) below the RAM size so workers are recycled before that."
        )
    total = r["memory_total_bytes"]
    limit = r["cgroup_limit_bytes"]
    budget = min(total, limit) if limit else total
    if budget and r["memory_available_bytes"] < 0.1 * budget:
        yield (
            "Less than 10% of memory is available now. Instead: stop other jobs, or run fewer workers "
            "(trainguard run --workers) with a memory limit each."
        )
    if r["allocator"] == "glibc" and usable >= 8 and not r["environment"].get("MALLOC_ARENA_MAX"):
        yield (
            f"glibc malloc may create up to {8 * usable} arenas on {usable} cores, which fragments memory "
            "in threaded input pipelines. Instead: set MALLOC_ARENA_MAX=2 or preload jemalloc "
            "(LD_PRELOAD=libjemalloc.so.2). (It does not cure the Keras/TF graph leak, which is live objects.)"
        )
    if deep.get("torch_num_threads") and usable and deep["torch_num_threads"] > usable:
        yield (
            f"torch uses {deep['torch_num_threads']} threads but only {usable} cores are usable. Instead: "
            "torch.set_num_threads(<cores per worker>) or OMP_NUM_THREADS."
        )


def _read_torch(out: dict[str, Any]) -> None:
    torch = importlib.import_module("torch")
    out["torch_num_threads"] = int(torch.get_num_threads())
    out["torch_cuda_available"] = bool(torch.cuda.is_available())
    out["torch_cuda_devices"] = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if out["torch_cuda_available"]
        else []
    )
    out["torch_cuda_version"] = torch.version.cuda


def _read_tensorflow(out: dict[str, Any]) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from trainguard.frameworks import adapter, install_quiet_imports

    # TF prints its absl and oneDNN banners before it reads TF_CPP_MIN_LOG_LEVEL: capture them
    install_quiet_imports()

    tf_adapter = adapter("tensorflow")
    out["tensorflow_gpus"] = tf_adapter.gpu_names(import_framework=True)  # type: ignore[attr-defined]
    out["tensorflow_memory_growth"] = tf_adapter.memory_growth(import_framework=True)  # type: ignore[attr-defined]
    tf = sys.modules["tensorflow"]
    out["tensorflow_built_with_cuda"] = bool(tf.test.is_built_with_cuda())


def _read_jax(out: dict[str, Any]) -> None:
    jax = importlib.import_module("jax")
    out["jax_devices"] = [str(d) for d in jax.devices()]


def _read_keras(out: dict[str, Any]) -> None:
    keras = importlib.import_module("keras")
    out["keras_backend_imported"] = keras.backend.backend()


#: What ``--deep`` asks each installed framework, in this order: its name, what it reads (the
#: progress line says it), and the reader that writes its findings into the deep dict as it goes
#: (a reader that fails part way leaves what it read before the error).
_DEEP_READERS: tuple[tuple[str, str, Callable[[dict[str, Any]], None]], ...] = (
    ("torch", "its threads and devices", _read_torch),
    ("tensorflow", "its GPUs and memory growth", _read_tensorflow),
    ("jax", "its devices", _read_jax),
    ("keras", "its backend", _read_keras),
)


def _deep(frameworks: dict[str, str | None], say: Callable[[str], None]) -> dict[str, Any]:
    """Import each installed framework and ask it about devices and settings; ``say`` hears which
    one is being imported (each takes seconds: the command is not silent meanwhile). A framework
    that fails leaves its error under ``errors``, by name."""
    out: dict[str, Any] = {"errors": {}}
    for name, reads, read in _DEEP_READERS:
        if frameworks.get(name):
            say(f"doctor --deep: importing {name} to read {reads}...")
            try:
                read(out)
            except Exception as err:
                out["errors"][name] = f"{type(err).__name__}: {err}"
    return out


def _process_tier() -> dict[str, Any] | None:
    try:
        from trainguard.process import this_machine

        return this_machine()
    except Exception:  # noqa: BLE001 - doctor reports what it can
        return None


def diagnose(*, deep: bool = False, progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Read the environment.

    Args:
        deep: import the installed frameworks (seconds) to read their devices, thread pools and
            memory-growth settings.
        progress: told, in one line, which framework ``deep`` is importing.

    Returns:
        A :class:`DoctorReport`; ``warnings`` lists configurations known to leak or waste memory,
        each with what to do instead.
    """
    import time

    import psutil

    from trainguard import frameworks as fw_mod
    from trainguard.probes import nvml
    from trainguard.probes.host import cgroup_memory, usable_cores

    start = time.perf_counter()
    vm = psutil.virtual_memory()
    try:
        swap_total = int(psutil.swap_memory().total)
    except Exception:
        swap_total = 0
    cg = cgroup_memory()
    usable = usable_cores()
    versions = fw_mod.versions()
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "cpus": os.cpu_count() or 1,
        "cpus_usable": usable,
        "cpu_quota": _cpu_quota(cg.path if cg else None),
        "memory_total_bytes": int(vm.total),
        "memory_available_bytes": int(vm.available),
        "swap_total_bytes": swap_total,
        "cgroup_version": cg.version if cg else None,
        "cgroup_limit_bytes": cg.limit_bytes if cg else None,
        "cgroup_usage_bytes": cg.usage_bytes if cg else None,
        "frameworks": versions,
        "keras_backend": fw_mod.keras_backend(),
        "nvml_available": nvml.nvml_available(),
        "gpus": [g.to_dict() for g in nvml.gpus()],
        "allocator": detect_allocator(),
        "threads": {v: os.environ.get(v) for v in THREAD_VARIABLES},
        "environment": {v: os.environ.get(v) for v in MEMORY_VARIABLES},
        "deep": _deep(versions, progress or (lambda _line: None)) if deep else None,
        "process": _process_tier(),
        "cgroup_layout": _read_layout(),
        "cgroup_memory_path": cg.path if cg else None,
        "nvml_absence": nvml.nvml_absence(),
    }
    report["warnings"] = _warnings(report)
    report["elapsed_s"] = time.perf_counter() - start
    return DoctorReport(**report)
