"""The names of the :class:`~trainguard.runner.device.Device` settings, for the places that list
them without importing the runner: ``trainguard run``'s device flags (``cli/_device.py``), the
words for a changed setting (``_settings_change.py``) and the warning about GPU-only settings on a
machine without a GPU (``runner/gpu_presence.py``). One list; a test holds it to Device's fields."""

from __future__ import annotations

__all__ = ["DEVICE_SETTINGS", "DEVICE_FLAG_SETTINGS", "GPU_ONLY_SETTINGS"]

#: Every Device setting, in field order.
DEVICE_SETTINGS: tuple[str, ...] = (
    "visible_devices",
    "tf_memory_growth",
    "tf_memory_limit",
    "torch_memory_fraction",
    "torch_alloc_conf",
    "jax_preallocate",
    "jax_memory_fraction",
    "mixed_precision",
    "torch_memory_history",
)
#: The settings ``trainguard run`` has a flag of the same name for (``--tf-memory-growth``...);
#: ``torch_memory_history``, a debugging record, is set from Python only.
DEVICE_FLAG_SETTINGS: tuple[str, ...] = tuple(n for n in DEVICE_SETTINGS if n != "torch_memory_history")
#: The settings that act only on a GPU (``mixed_precision`` also acts on a CPU).
GPU_ONLY_SETTINGS: tuple[str, ...] = tuple(n for n in DEVICE_SETTINGS if n != "mixed_precision")
