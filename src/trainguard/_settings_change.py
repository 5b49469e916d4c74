"""What changed between two sessions' settings of one run, said in one short line.

A run's settings are kept per session as JSON (the policy nested under ``"policy"``, a Device's
under ``"device"``). A resume with other flags changes a few leaves of that tree; the whole policy
printed twice (2,431 characters for one changed limit) hid them. :func:`setting_changes` compares
leaf by leaf; :func:`change_words` names each as the caller gave it, ``trainguard run``'s flag
(``--memory-limit 2GB → 3GB``) or the Python keyword (``memory_limit 2GB → 3GB``), with sizes and
durations in units. Pure: the store, the session and the CLI all read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from trainguard._device_settings import DEVICE_FLAG_SETTINGS

__all__ = ["setting_changes", "setting_leaves", "change_words", "value_words", "setting_name"]

#: leaves not said: derived from others, or internal (each Device setting's environment variables)
_SKIPPED = ("device.env", "fn_version")
#: leaves in bytes and in seconds
_SIZES = frozenset(
    {
        "memory_budget",
        "max_result_bytes",
        "malloc_trim_threshold",
        "policy.memory_limit",
        "policy.gpu_memory_limit",
        "policy.recycle_above",
        "policy.recycle_growth",
        "policy.soft_limit",
        "device.tf_memory_limit",
    }
)
_SECONDS = frozenset({"sample_interval_s", "policy.timeout", "policy.pressure_grace"})
#: ``trainguard run``'s flag for a leaf, where it is not ``--`` + the leaf's name with dashes
_FLAGS = {
    "threads": "threads per worker",
    "workers_auto": "--workers auto",
    "max_result_bytes": "--max-result-size",
    "tf_custom_gradients": "tf_custom_gradients (--keep-tf-gradients)",
    "policy.on_error": "on_error (--stop-on-error)",
    "policy.predict_peaks": "predict_peaks (--no-predict)",
    "sample_interval_s": "sample_interval",
}
#: leaves ``trainguard run`` has a flag of the same name for
_SAME_FLAG = frozenset(
    {
        "workers",
        "memory_budget",
        "keras_backend",
        "allocator",
        "preload",
        "tree_tracking",
        "seed",
        "gpu_memory_budget",
        "predict_from",
        *(
            f"policy.{n}"
            for n in (
                "memory_limit",
                "gpu_memory_limit",
                "timeout",
                "max_trials_per_worker",
                "max_stages_per_worker",
                "soft_limit",
                "pressure_grace",
                "recycle_above",
                "peak_ratio",
                "retries",
                "retry_on",
                "on_oom",
            )
        ),
        *(f"device.{n}" for n in DEVICE_FLAG_SETTINGS),
    }
)


_GROUPS = ("policy", "device")


def _leaves(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level settings as they are; the policy's and the Device's one level down, dotted."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _GROUPS and (isinstance(value, Mapping) or value is None):
            for leaf, inner in (value or {}).items():
                out[f"{key}.{leaf}"] = inner
        else:
            out[str(key)] = value
    return {k: v for k, v in out.items() if k not in _SKIPPED}


def setting_leaves(settings: Any) -> dict[str, Any]:
    """One session's settings by leaf name (``"policy.memory_limit"``), as :func:`setting_changes` names them."""
    return _leaves(settings) if isinstance(settings, Mapping) else {}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def setting_changes(before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    """``[(leaf, before, after), ...]`` for each leaf of two sessions' settings that differs, in
    the settings' order (``"policy.memory_limit"`` for the policy's, ``"device.…"`` for a Device's).
    A Device's leaves count as unset (None) on a side without one; a setting one side never
    recorded (written by an older release) is left out."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return []
    old, new = _leaves(before), _leaves(after)

    def known(name: str, side: dict[str, Any], raw: Mapping[str, Any]) -> bool:
        # a setting an older release did not record is no change; a Device given on one side only is
        group = name.partition(".")[0]
        return name in side or (group in _GROUPS and raw.get(group) is None and group in raw)

    names = [n for n in dict.fromkeys([*old, *new]) if known(n, old, before) and known(n, new, after)]
    return [(n, old.get(n), new.get(n)) for n in names if _canonical(old.get(n)) != _canonical(new.get(n))]


def _size(n: int) -> str:
    """Bytes as the user most likely wrote them: ``2GB`` for 2,000,000,000, ``3GiB``, else the
    nearest binary unit."""
    for unit, factor in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    from trainguard.units import format_bytes

    return format_bytes(n).replace(" ", "")


def value_words(name: str, value: Any) -> str:
    """One setting's value in words: sizes and durations in units, none for unset."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if name in _SIZES and isinstance(value, int):
        return _size(value)
    if name in _SECONDS and isinstance(value, (int, float)):
        return f"{value:g}s"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def setting_name(name: str, *, flags: bool) -> str:
    """A leaf as ``trainguard run``'s flag (``flags``) or as its Python keyword."""
    if flags:
        if name in _FLAGS:
            return _FLAGS[name]
        if name in _SAME_FLAG:
            return "--" + name.rpartition(".")[2].replace("_", "-")
    leaf = name.rpartition(".")[2]
    return name if name.startswith("device.") else leaf


def change_words(changes: Iterable[tuple[str, Any, Any]], *, flags: bool = False) -> str:
    """``--memory-limit 2GB → 3GB, --workers 1 → 2`` (``flags``) or ``memory_limit 2GB → 3GB, workers 1 → 2``."""
    return ", ".join(
        f"{setting_name(n, flags=flags)} {value_words(n, old)} → {value_words(n, new)}"
        for n, old, new in changes
    )
