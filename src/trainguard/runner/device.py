"""Device policy per worker, applied before any framework initialises its devices.

``Runner(device=trainguard.Device(...))`` puts environment variables in place before the worker
starts (``CUDA_VISIBLE_DEVICES``, ``PYTORCH_CUDA_ALLOC_CONF``, ``XLA_PYTHON_CLIENT_PREALLOCATE``,
``XLA_PYTHON_CLIENT_MEM_FRACTION``, ``TF_FORCE_GPU_ALLOW_GROWTH``) and has the worker call the
framework APIs that only work before the devices are initialised (TensorFlow's
``set_memory_growth`` and ``set_logical_device_configuration``, PyTorch's
``set_per_process_memory_fraction``, the Keras global dtype policy) during its bootstrap, before the
trial function is even loaded. The worker then reads the settings back from the framework where it
can be asked (``get_memory_growth``, the logical devices, ``get_per_process_memory_fraction``,
``global_policy()``) and reports them; the supervisor records that report as a ``device`` event.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["Device", "apply_in_worker"]

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Device:
    """What each worker's frameworks are told about the GPU before they touch it.

    Args:
        visible_devices: GPU indices (or UUIDs) for ``CUDA_VISIBLE_DEVICES``, e.g. ``[0]`` or
            ``"0,1"``; ``""`` hides every GPU. None leaves the environment's value.
        tf_memory_growth: TensorFlow allocates GPU memory as needed instead of all at start
            (``tf.config.experimental.set_memory_growth`` on every visible GPU).
        tf_memory_limit: a logical GPU with this much memory per physical GPU ("4GB";
            ``set_logical_device_configuration``). Cannot be combined with ``tf_memory_growth``.
        torch_memory_fraction: PyTorch's per-process cap as a fraction of each GPU, in (0, 1]
            (``torch.cuda.set_per_process_memory_fraction``).
        torch_alloc_conf: ``PYTORCH_CUDA_ALLOC_CONF``, e.g. ``"expandable_segments:True"``.
        jax_preallocate: ``XLA_PYTHON_CLIENT_PREALLOCATE`` (JAX grabs 75 % of the GPU at start when true).
        jax_memory_fraction: ``XLA_PYTHON_CLIENT_MEM_FRACTION``, in (0, 1].
        mixed_precision: a Keras global dtype policy set in every worker, e.g. ``"mixed_float16"``.
        torch_memory_history: record PyTorch's CUDA allocation history in every worker (the last N
            allocations, or True for 100,000); a trial that runs out of CUDA memory then dumps a
            memory snapshot (``torch.cuda.memory._dump_snapshot``, for pytorch.org/memory_viz) into
            the run's private folder, and its flight recorder names the file.

    Raises:
        ConfigError: a value of the wrong kind or range (:meth:`check` also checks the frameworks
            are installed and the GPU indices exist).
    """

    visible_devices: str | Sequence[int | str] | None = None
    tf_memory_growth: bool | None = None
    tf_memory_limit: str | int | None = None
    torch_memory_fraction: float | None = None
    torch_alloc_conf: str | None = None
    jax_preallocate: bool | None = None
    jax_memory_fraction: float | None = None
    mixed_precision: str | None = None
    torch_memory_history: bool | int | None = None

    def __post_init__(self) -> None:
        from trainguard.units import parse_size

        visible = self.visible_devices
        if visible is not None:
            if isinstance(visible, int) and not isinstance(visible, bool):
                visible = [visible]
            if isinstance(visible, str):
                entries = [v.strip() for v in visible.split(",") if v.strip()]
            else:
                entries = [str(v).strip() for v in visible]
            for entry in entries:
                if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
                    raise ConfigError(
                        f"visible_devices entry {entry!r} is not a GPU index or UUID: use e.g. [0, 1] or '' for none"
                    )
            object.__setattr__(self, "visible_devices", ",".join(entries))
        for name in ("tf_memory_growth", "jax_preallocate"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"{name}={value!r} must be True, False or None")
        limit = parse_size(self.tf_memory_limit, name="tf_memory_limit", allow_none=True)
        if limit is not None and limit < _MIB:
            raise ConfigError(f"tf_memory_limit={self.tf_memory_limit!r} is under 1 MiB: give e.g. '4GB'")
        object.__setattr__(self, "tf_memory_limit", limit)
        if limit is not None and self.tf_memory_growth:
            raise ConfigError(
                "tf_memory_growth and tf_memory_limit cannot both be set: TensorFlow refuses memory growth on a "
                "GPU with a logical memory limit; choose one"
            )
        for name in ("torch_memory_fraction", "jax_memory_fraction"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and 0.0 < value <= 1.0)
            ):
                raise ConfigError(f"{name}={value!r} must be a fraction in (0, 1], such as 0.5")
        if self.torch_alloc_conf is not None and (
            not isinstance(self.torch_alloc_conf, str) or ":" not in self.torch_alloc_conf
        ):
            raise ConfigError(
                f"torch_alloc_conf={self.torch_alloc_conf!r} is not an allocator setting: use e.g. "
                "'expandable_segments:True'"
            )
        history = self.torch_memory_history
        if history is True:
            object.__setattr__(self, "torch_memory_history", TORCH_HISTORY_ENTRIES)
        elif history is False:
            object.__setattr__(self, "torch_memory_history", None)
        elif history is not None and (not isinstance(history, int) or history < 1):
            raise ConfigError(
                f"torch_memory_history={history!r} must be True or a number of allocations >= 1, such as 100000"
            )
        if self.mixed_precision is not None and self.mixed_precision not in (
            "mixed_float16",
            "mixed_bfloat16",
            "float32",
            "float16",
            "bfloat16",
        ):
            raise ConfigError(
                f"mixed_precision={self.mixed_precision!r} is not a Keras dtype policy: use 'mixed_float16' "
                "or 'mixed_bfloat16'"
            )

    # -- what the settings need ------------------------------------------------------------------

    def frameworks(self) -> dict[str, list[str]]:
        """Which package each set field needs: ``{"tensorflow": ["tf_memory_growth"], ...}``.

        Returns:
            The set fields, by the package each needs.
        """
        need: dict[str, list[str]] = {}
        for name, package in (
            ("tf_memory_growth", "tensorflow"),
            ("tf_memory_limit", "tensorflow"),
            ("torch_memory_fraction", "torch"),
            ("torch_alloc_conf", "torch"),
            ("jax_preallocate", "jax"),
            ("jax_memory_fraction", "jax"),
            ("mixed_precision", "keras"),
            ("torch_memory_history", "torch"),
        ):
            if getattr(self, name) is not None:
                need.setdefault(package, []).append(name)
        return need

    def check(self, gpu_count: int | None = None) -> None:
        """Refuse, in one line, settings for a framework that is not installed or a GPU index that
        does not exist. ``gpu_count`` defaults to what NVML sees (0 without NVML or a driver).

        Raises:
            ConfigError: as above.

        Args:
            gpu_count: how many GPUs there are; None asks NVML.
        """
        for package, fields in self.frameworks().items():
            if importlib.util.find_spec(package) is None:
                raise ConfigError(
                    f"Device {', '.join(fields)} needs {package}, which is not installed: install it "
                    f"(pip install {package}) or drop the setting"
                )
        # __post_init__ joined the entries into one string
        visible = self.visible_devices if isinstance(self.visible_devices, str) else ""
        indices = [int(v) for v in visible.split(",") if v.isdigit()]
        if indices:
            if gpu_count is None:
                from trainguard.probes.nvml import gpus

                gpu_count = len(gpus())
            missing = [i for i in indices if i >= gpu_count]
            if missing:
                seen = (
                    f"{gpu_count} GPU{'s' if gpu_count != 1 else ''} (indices 0-{gpu_count - 1})"
                    if gpu_count
                    else ("no NVIDIA GPU (NVML sees none)")
                )
                raise ConfigError(
                    f"Device visible_devices has GPU index {missing[0]}, which does not exist: this machine has "
                    f"{seen}; use visible_devices='' to hide GPUs"
                )

    def env(self) -> dict[str, str]:
        """The environment variables these settings put in every worker's environment.

        Returns:
            The variables, by name.
        """
        out: dict[str, str] = {}
        if self.visible_devices is not None:
            out["CUDA_VISIBLE_DEVICES"] = str(self.visible_devices)
        if self.tf_memory_growth is not None:
            out["TF_FORCE_GPU_ALLOW_GROWTH"] = "true" if self.tf_memory_growth else "false"
        if self.torch_alloc_conf is not None:
            out["PYTORCH_CUDA_ALLOC_CONF"] = self.torch_alloc_conf
        if self.jax_preallocate is not None:
            out["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if self.jax_preallocate else "false"
        if self.jax_memory_fraction is not None:
            out["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{self.jax_memory_fraction:g}"
        return out

    def worker_settings(self) -> dict[str, Any]:
        """What the worker applies through framework APIs at bootstrap (JSON).

        Returns:
            The settings, as plain JSON values.
        """
        out: dict[str, Any] = {}
        for name in (
            "tf_memory_growth",
            "tf_memory_limit",
            "torch_memory_fraction",
            "mixed_precision",
            "torch_memory_history",
        ):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        out["env"] = self.env()
        return out

    def to_dict(self) -> dict[str, Any]:
        """The settings that are set, as JSON-ready data (stored with each worker's config).

        Returns:
            The set fields by name.
        """
        return {name: getattr(self, name) for name in Device.__dataclass_fields__}


def apply_in_worker(settings: dict[str, Any]) -> dict[str, Any]:
    """Worker side, before the trial function is loaded: apply the settings through the
    frameworks' APIs, then read back what each framework says. Returns a JSON-ready report.

    Raises whatever the framework raises when a setting is refused (the worker reports it as fatal).
    """
    report: dict[str, Any] = {
        "env": {name: os.environ.get(name) for name in settings.get("env", {})},
    }
    if "tf_memory_growth" in settings or "tf_memory_limit" in settings:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        growth = settings.get("tf_memory_growth")
        limit = settings.get("tf_memory_limit")
        for gpu in gpus:
            if limit is not None:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(limit) // _MIB)]
                )
            elif growth is not None:
                tf.config.experimental.set_memory_growth(gpu, bool(growth))
        tf_report: dict[str, Any] = {"physical_gpus": [g.name for g in gpus]}
        if limit is None:
            tf_report["memory_growth"] = [bool(tf.config.experimental.get_memory_growth(g)) for g in gpus]
        else:
            tf_report["logical_memory_limit_mib"] = [
                [c.memory_limit for c in (tf.config.get_logical_device_configuration(g) or [])] for g in gpus
            ]
        tf_report["logical_gpus"] = [d.name for d in tf.config.list_logical_devices("GPU")]
        if not gpus:
            tf_report["note"] = "no GPU visible to TensorFlow: nothing to configure"
        report["tensorflow"] = tf_report
    if "torch_memory_fraction" in settings:
        import torch

        fraction = float(settings["torch_memory_fraction"])
        torch_report: dict[str, Any] = {"cuda_available": bool(torch.cuda.is_available())}
        if torch.cuda.is_available():
            count = torch.cuda.device_count()
            for index in range(count):
                torch.cuda.set_per_process_memory_fraction(fraction, index)
            getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
            if getter is not None:
                torch_report["memory_fraction"] = [float(getter(i)) for i in range(count)]
        else:
            torch_report["note"] = "no CUDA device visible to torch: nothing to configure"
        report["torch"] = torch_report
    if "torch_memory_history" in settings:
        report.setdefault("torch", {})["memory_history"] = start_torch_memory_history(
            int(settings["torch_memory_history"])
        )
    if "mixed_precision" in settings:
        import keras

        keras.mixed_precision.set_global_policy(settings["mixed_precision"])
        report["keras"] = {"global_policy": keras.mixed_precision.global_policy().name}
    if "torch" in sys.modules and "PYTORCH_CUDA_ALLOC_CONF" in settings.get("env", {}):
        report.setdefault("torch", {})["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    return report


#: allocations kept by ``Device(torch_memory_history=True)``
TORCH_HISTORY_ENTRIES = 100_000
#: set in a worker whose CUDA allocation history is recorded (its OOM handler dumps a snapshot)
_HISTORY_ON = [False]


def start_torch_memory_history(max_entries: int) -> str:
    """Worker side: start recording PyTorch's CUDA allocation history (GPU only; not run here)."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device visible to torch: no memory history"
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    _HISTORY_ON[0] = True
    return f"recording the last {max_entries} CUDA allocations"


def dump_torch_memory_snapshot(folder: str | None, index: int, attempt: int) -> str | None:
    """Worker side, after a CUDA out-of-memory error: write the allocation history's snapshot into
    ``folder`` and return its path (None when no history is recorded or the dump fails)."""
    if not _HISTORY_ON[0] or folder is None or "torch" not in sys.modules:
        return None
    import torch

    path = os.path.join(folder, f"torch-memory-trial{index}-attempt{attempt}.pickle")
    try:
        torch.cuda.memory._dump_snapshot(path)  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - the failure being recorded matters more than its snapshot
        return None
    return path
