"""Process trees and the one watchdog loop over them.

- :mod:`~trainguard.process.tree`: find a root's processes and read their memory from ``/proc``;
  :class:`ProcessTree` is one tree read many times a second.
- :mod:`~trainguard.process.memory`: a tree's memory summed once (:func:`tree_memory`).
- :mod:`~trainguard.process.cgroup`: a cgroup v2 per tree, the subreaper fallback.
- :mod:`~trainguard.process.kill`: ending a tree (cgroup, process group, every descendant).
- :mod:`~trainguard.process.watch`: the one fixed-rate loop "read the tree -> check limits -> act"
  that the local session, the Ray slot agent, the sampler and ``scope`` run.
- :mod:`~trainguard.process.sampler` and :mod:`~trainguard.process.probes`: the background sampler
  and its bounded timeline (public as :mod:`trainguard.sampling`).
"""

from __future__ import annotations

from trainguard.process.cgroup import TreeCgroup, become_subreaper, tracking_mechanisms
from trainguard.process.kill import kill_descendants, kill_tree, signal_name
from trainguard.process.memory import TreeMemory, tree_memory
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
]
