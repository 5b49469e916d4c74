"""Host memory probes: one process, a process tree, the system, and the container's cgroup.

All functions are read-only and return frozen records whose field names carry their units.
RSS is cheap (one ``/proc/PID/statm`` read); USS and PSS need ``/proc/PID/smaps_rollup`` and cost
more, so they are read only when asked for (``detail=True``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = [
    "TreeMemory",
    "SystemMemory",
    "CgroupMemory",
    "tree_memory",
    "system_memory",
    "cgroup_memory",
]


@dataclass(frozen=True, slots=True)
class TreeMemory:
    """Memory of a process and all its live descendants, summed.

    RSS summed over a tree counts shared pages (libraries, a file mapped by two) once per process, so
    it overstates; PSS divides shared pages among their users and is the right sum for a tree. A
    forked child that has not called exec is charged its private pages only (see
    :func:`trainguard.process.fork_charge_bytes`), not its parent's pages a second time.
    """

    root_pid: int
    pids: tuple[int, ...]
    rss_bytes: int
    uss_bytes: int | None = None
    pss_bytes: int | None = None
    children_rss_bytes: int = 0

    @property
    def process_count(self) -> int:
        return len(self.pids)


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


def tree_memory(pid: int | None = None, *, detail: bool = False) -> TreeMemory:
    """Memory of ``pid`` and its descendants (found and read by :mod:`trainguard.process`, from
    ``/proc``). Processes that exit while being read are skipped.

    Raises:
        psutil.NoSuchProcess: the root process itself does not exist.
    """
    from trainguard import process as proctree

    root = pid or os.getpid()
    root_rss = proctree.statm_rss_bytes(root)
    if root_rss is None:
        raise psutil.NoSuchProcess(root)
    pids: list[int] = [root]
    rss = root_rss
    uss = pss = 0
    children_rss = 0
    have_detail = detail
    if detail:
        rollup = proctree.smaps_rollup_bytes(root)
        if rollup is None:
            have_detail = False
        else:
            uss, pss = rollup.uss_bytes, rollup.pss_bytes
    for child in proctree.descendants(root):
        r = proctree.statm_rss_bytes(child)
        if r is None:
            continue
        parent = proctree.unexeced_fork_parent(child)
        if parent is not None:
            # a fork not exec'd yet maps its parent's pages (a vfork shares them): not new memory
            r = proctree.fork_charge_bytes(child, parent)
        if detail and have_detail:
            rollup = proctree.smaps_rollup_bytes(child)
            if rollup is None:
                have_detail = False
            else:
                uss += rollup.uss_bytes
                pss += rollup.pss_bytes
        pids.append(child)
        rss += r
        children_rss += r
    return TreeMemory(
        root_pid=root,
        pids=tuple(pids),
        rss_bytes=rss,
        uss_bytes=uss if have_detail else None,
        pss_bytes=pss if have_detail else None,
        children_rss_bytes=children_rss,
    )


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
