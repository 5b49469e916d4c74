"""Host memory probes: the system and the container's cgroup.

All functions are read-only and return frozen records whose field names carry their units. A
process tree's memory is :func:`trainguard.process.tree_memory` (the tree's own package).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = [
    "SystemMemory",
    "CgroupMemory",
    "system_memory",
    "cgroup_memory",
    "usable_cores",
    "usable_memory_bytes",
]


@dataclass(frozen=True, slots=True)
class SystemMemory:
    total_bytes: int
    available_bytes: int
    used_bytes: int
    percent: float


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    """The memory limit and usage of the cgroup this process is in (v1 or v2). ``limit_bytes`` is
    None when the cgroup has no limit. ``oom_kill_count`` comes from ``memory.events`` (v2) or
    ``memory.oom_control`` (v1) when readable."""

    version: int
    path: str
    limit_bytes: int | None
    usage_bytes: int | None
    oom_kill_count: int | None = None


def system_memory() -> SystemMemory:
    vm = psutil.virtual_memory()
    return SystemMemory(
        total_bytes=vm.total, available_bytes=vm.available, used_bytes=vm.used, percent=vm.percent
    )


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text in ("", "max"):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def cgroup_memory(proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> CgroupMemory | None:
    """The memory cgroup of this process, or None when there is none to read.

    ``proc_root`` and ``cgroup_root`` exist so tests can point at a recorded tree.
    """
    try:
        lines = Path(proc_root, "self", "cgroup").read_text().splitlines()
    except OSError:
        return None
    v2_path = None
    v1_path = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    root = Path(cgroup_root)
    if v1_path is not None:
        for base in (root / "memory" / v1_path.lstrip("/"), root / "memory"):
            if (base / "memory.usage_in_bytes").exists():
                limit = _read_int(base / "memory.limit_in_bytes")
                # v1 reports "no limit" as a huge page-aligned number
                if limit is not None and limit >= 1 << 60:
                    limit = None
                oom = None
                try:
                    for row in (base / "memory.oom_control").read_text().splitlines():
                        if row.startswith("oom_kill "):
                            oom = int(row.split()[1])
                except (OSError, ValueError, IndexError):
                    pass
                return CgroupMemory(1, str(base), limit, _read_int(base / "memory.usage_in_bytes"), oom)
    if v2_path is not None:
        for base in (root / v2_path.lstrip("/"), root):
            if (base / "memory.current").exists():
                oom = None
                try:
                    for row in (base / "memory.events").read_text().splitlines():
                        key, _, val = row.partition(" ")
                        if key == "oom_kill":
                            oom = int(val)
                except (OSError, ValueError):
                    pass
                return CgroupMemory(
                    2, str(base), _read_int(base / "memory.max"), _read_int(base / "memory.current"), oom
                )
    return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, or the machine's count where there is
    no affinity to read (macOS, Windows).

    Returns:
        The number of cores, at least 1.
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_memory_bytes() -> int | None:
    """The memory this process may use: the machine's, or its cgroup's limit when lower.

    Returns:
        Bytes, or None when the machine's memory cannot be read (a cgroup that cannot be read
        leaves the machine's).
    """
    try:
        total = system_memory().total_bytes
    except Exception:  # noqa: BLE001 - no reading: nothing to compare with
        return None
    try:
        group = cgroup_memory()
    except Exception:  # noqa: BLE001
        group = None
    limit = getattr(group, "limit_bytes", None) if group is not None else None
    return min(total, limit) if limit else total
