"""A process tree's memory, summed: RSS always, USS and PSS when asked (``detail=True``).

RSS is cheap (one ``/proc/PID/statm`` read); USS and PSS need ``/proc/PID/smaps_rollup`` and cost
more, so they are read only when asked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from trainguard.process.tree import (
    descendants,
    fork_charge_bytes,
    smaps_rollup_bytes,
    statm_rss_bytes,
    unexeced_fork_parent,
)

__all__ = ["TreeMemory", "tree_memory"]


@dataclass(frozen=True, slots=True)
class TreeMemory:
    """Memory of a process and all its live descendants, summed.

    RSS summed over a tree counts shared pages (libraries, a file mapped by two) once per process, so
    it overstates; PSS divides shared pages among their users and is the right sum for a tree. A
    forked child that has not called exec is charged its private pages only (see
    :func:`~trainguard.process.tree.fork_charge_bytes`), not its parent's pages a second time.
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


def tree_memory(pid: int | None = None, *, detail: bool = False) -> TreeMemory:
    """Memory of ``pid`` and its descendants (found and read by :mod:`trainguard.process.tree`,
    from ``/proc``). Processes that exit while being read are skipped.

    Raises:
        psutil.NoSuchProcess: the root process itself does not exist.

    Args:
        pid: the root process; None for this process.
        detail: also read USS and PSS (slower: each process's memory map is read).

    Returns:
        The tree's summed RSS, its pids and, with ``detail``, USS and PSS (None where unreadable).
    """
    root = pid or os.getpid()
    root_rss = statm_rss_bytes(root)
    if root_rss is None:
        raise psutil.NoSuchProcess(root)
    pids: list[int] = [root]
    rss = root_rss
    uss = pss = 0
    children_rss = 0
    have_detail = detail
    if detail:
        rollup = smaps_rollup_bytes(root)
        if rollup is None:
            have_detail = False
        else:
            uss, pss = rollup.uss_bytes, rollup.pss_bytes
    for child in descendants(root):
        r = statm_rss_bytes(child)
        if r is None:
            continue
        parent = unexeced_fork_parent(child)
        if parent is not None:
            # a fork not exec'd yet maps its parent's pages (a vfork shares them): not new memory
            r = fork_charge_bytes(child, parent)
        if detail and have_detail:
            rollup = smaps_rollup_bytes(child)
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
