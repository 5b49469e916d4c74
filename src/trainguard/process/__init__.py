"""Process trees and the one watchdog loop over them.

- :mod:`~trainguard.process.tree`: find a root's processes and read their memory from ``/proc``;
  :class:`ProcessTree` is one tree read many times a second.
- :mod:`~trainguard.process.memory`: a tree's memory summed once (:func:`tree_memory`).
- :mod:`~trainguard.process.charge` (pure): what a memory limit counts (anonymous and shared
  memory, not reclaimable file-backed pages); :mod:`~trainguard.process.tmpfs`: the tmpfs memory a
  trial holds (files no RSS shows) and the files it leaves in ``/dev/shm``.
- :mod:`~trainguard.process.cgroup`: a cgroup v2 per tree, the subreaper fallback.
- :mod:`~trainguard.process.kill`: ending a tree (cgroup, process group, every descendant).
- :mod:`~trainguard.process.watch`: the one fixed-rate loop "read the tree -> check limits -> act"
  that the local session, the Ray slot agent, the sampler and ``scope`` run.
- :mod:`~trainguard.process.sampler` and :mod:`~trainguard.process.probes`: the background sampler
  and its bounded timeline (public as :mod:`trainguard.sampling`).
- Tiers: the above is the Linux tier; :mod:`~trainguard.process.portable` (psutil and a process
  group, macOS's default) and :mod:`~trainguard.process.windows` (a Job Object) have the same
  tree surface; :mod:`~trainguard.process.tiers` chooses between them and says what each
  guarantees.
"""

from __future__ import annotations

from typing import Any

from trainguard.process.cgroup import TreeCgroup, become_subreaper, tracking_mechanisms
from trainguard.process.kill import kill_descendants, kill_tree, signal_name
from trainguard.process.memory import TreeMemory, tree_memory
from trainguard.process.tiers import (
    TRACKING_CHOICES,
    Guarantee,
    guarantees,
    refuse_linux_only,
    resolve_tracking,
    this_machine,
)
from trainguard.process.tree import (
    HAVE_PROC,
    PAGE_SIZE,
    ProcessTree,
    SmapsRollup,
    children,
    descendants,
    fork_charge_bytes,
    smaps_rollup_bytes,
    statm_rss_bytes,
    unexeced_fork_parent,
)

__all__ = [
    "PAGE_SIZE",
    "HAVE_PROC",
    "statm_rss_bytes",
    "smaps_rollup_bytes",
    "SmapsRollup",
    "children",
    "descendants",
    "unexeced_fork_parent",
    "fork_charge_bytes",
    "ProcessTree",
    "TreeMemory",
    "tree_memory",
    "TreeCgroup",
    "kill_tree",
    "kill_descendants",
    "signal_name",
    "become_subreaper",
    "tracking_mechanisms",
    "TRACKING_CHOICES",
    "Guarantee",
    "guarantees",
    "refuse_linux_only",
    "resolve_tracking",
    "this_machine",
    "kill_worker_tree",
    "popen_options",
    "tier_tree",
]


def kill_worker_tree(pid: int) -> list[int]:
    """SIGKILL a worker's whole tree with the best means this platform has."""
    import sys

    if sys.platform.startswith("linux"):
        return kill_tree(pid)
    from trainguard.process.portable import PortableTree

    return PortableTree(pid).kill()


def popen_options(tier: str) -> dict[str, Any]:
    """``subprocess.Popen`` keywords that give a worker its tier's start: its own session and
    process group on POSIX; on Windows created suspended in a new process group (the Job Object
    is assigned before it runs: :func:`tier_tree`)."""
    if tier == "windows":
        from trainguard.process.windows import CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED

        return {"creationflags": CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def tier_tree(proc: Any, tier: str, memory_limit_bytes: int | None = None) -> Any:
    """The tree object of a worker just started with :func:`popen_options` (``"portable"`` or
    ``"windows"``; the Linux tier's is :class:`~trainguard.process.tree.ProcessTree`)."""
    if tier == "windows":
        from trainguard.process.windows import JobObject, WindowsTree

        job = JobObject(memory_limit_bytes)
        job.assign_and_resume(proc.pid)
        return WindowsTree(proc.pid, job)
    from trainguard.process.portable import PortableTree

    return PortableTree(proc.pid)
