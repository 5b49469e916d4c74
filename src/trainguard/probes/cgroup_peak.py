"""Exact memory peaks where the kernel keeps them: a process's memory cgroup.

cgroup v2 keeps ``memory.peak`` (the high-water mark of the cgroup's memory, since it was made) and
``memory.events`` (``oom``, ``oom_kill``, ``max`` counts); cgroup v1 keeps
``memory.max_usage_in_bytes`` and ``memory.failcnt``. A sampler reading RSS every 100 ms misses a
spike between two samples; these do not. They count the cgroup's charged memory (anonymous pages
*and* page cache), so they are read beside the sampled RSS peak, never instead of it.

Only a cgroup that is the process's own counts (``own_memory_cgroup``): a worker that shares the
supervisor's cgroup would report the whole machine's or container's peak.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["memory_cgroup_dir", "own_memory_cgroup", "read_peak", "cgroup_peak"]


def _mounts() -> list[tuple[str, str, str, str]]:
    """``(fstype, root, mount_point, super_options)`` of the cgroup mounts."""
    out: list[tuple[str, str, str, str]] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            rows = fh.read().splitlines()
    except OSError:
        return out
    for row in rows:
        head, _, tail = row.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) >= 5 and rest and rest[0] in ("cgroup", "cgroup2"):
            out.append((rest[0], fields[3], fields[4], rest[-1] if len(rest) >= 3 else ""))
    return out


def memory_cgroup_dir(pid: int) -> tuple[str, str] | None:
    """``(version, directory)`` of ``pid``'s memory cgroup: v2 when the unified hierarchy has the
    memory controller for it, else v1's ``memory`` hierarchy; None when neither is readable."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    for fstype, root, mount_point, _options in _mounts():
        if fstype == "cgroup2" and "" in paths:
            rel = _relative(paths[""], root)
            folder = os.path.join(mount_point, rel)
            if os.path.isfile(os.path.join(folder, "memory.peak")) or os.path.isfile(
                os.path.join(folder, "memory.current")
            ):
                return "v2", folder
    for fstype, root, mount_point, options in _mounts():
        if fstype == "cgroup" and "memory" in options.split(",") and "memory" in paths:
            folder = os.path.join(mount_point, _relative(paths["memory"], root))
            if os.path.isfile(os.path.join(folder, "memory.max_usage_in_bytes")):
                return "v1", folder
    return None


def _relative(path: str, root: str) -> str:
    if root != "/" and path.startswith(root):
        path = path[len(root) :]
    return path.lstrip("/")


def own_memory_cgroup(pid: int, *, than: int | None = None) -> tuple[str, str] | None:
    """``pid``'s memory cgroup when it is not the one of ``than`` (default: this process): only then
    is its peak the process tree's own."""
    mine = memory_cgroup_dir(pid)
    if mine is None:
        return None
    other = memory_cgroup_dir(os.getpid() if than is None else than)
    if other is not None and os.path.realpath(other[1]) == os.path.realpath(mine[1]):
        return None
    return mine


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def read_peak(version: str, folder: str) -> dict[str, Any] | None:
    """The exact peak of a memory cgroup, with its counters: ``{"peak_bytes", "source", ...}``."""
    if version == "v2":
        peak = _read_int(os.path.join(folder, "memory.peak"))
        if peak is None:
            return None
        out: dict[str, Any] = {"peak_bytes": peak, "source": "cgroup v2 memory.peak"}
        try:
            with open(os.path.join(folder, "memory.events"), encoding="utf-8") as fh:
                for line in fh.read().splitlines():
                    key, _, value = line.partition(" ")
                    if key in ("max", "oom", "oom_kill") and value.isdigit():
                        out[f"events_{key}"] = int(value)
        except OSError:
            pass
        return out
    peak = _read_int(os.path.join(folder, "memory.max_usage_in_bytes"))
    if peak is None:
        return None
    out = {"peak_bytes": peak, "source": "cgroup v1 memory.max_usage_in_bytes"}
    failcnt = _read_int(os.path.join(folder, "memory.failcnt"))
    if failcnt is not None:
        out["failcnt"] = failcnt
    return out


def cgroup_peak(pid: int) -> dict[str, Any] | None:
    """The exact peak of ``pid``'s own memory cgroup, or None (no memory controller for it, or a
    cgroup shared with this process)."""
    found = own_memory_cgroup(pid)
    return None if found is None else read_peak(*found)
