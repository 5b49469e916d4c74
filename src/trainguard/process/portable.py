"""The portable process tier: a worker's tree through psutil alone, ended by process group.

What macOS (and any POSIX system that is not Linux) gets, and what ``tree_tracking="portable"``
forces on Linux. No ``/proc`` file is read by trainguard, no child subreaper is made and no cgroup:

- **Membership**: the root and ``psutil.Process.children(recursive=True)``, re-found at most every
  ``rediscover_s``. A process that detaches (double fork, ``setsid``) is re-parented to init and
  leaves the tree: its memory is no longer counted (approximate).
- **Memory**: RSS summed over the members (``memory_info``), USS on request (``memory_full_info``).
- **Kill**: ``killpg`` of the worker's own process group (it starts one), then SIGKILL to every
  member seen and still the same process (start time checked, so a reused pid is never hit). A
  daemon that left the process group (``setsid``) escapes: the docs and ``doctor`` say so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable

import psutil

__all__ = ["PortableTree", "kill_group_and", "kill_children_portable"]


def _same_process(pid: int, created: float | None) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if created is not None and abs(proc.create_time() - created) > 0.01:
            return None  # the pid now names another process
        return proc
    except (psutil.Error, OSError):
        return None


def kill_group_and(
    root_pid: int, members: Iterable[tuple[int, float | None]], *, root_reaped: bool = False
) -> list[int]:
    """SIGKILL the process group ``root_pid`` leads (POSIX), the root, and each ``(pid, created)``
    member that is still the process seen; returns the pids signalled."""
    killed: list[int] = []
    if hasattr(os, "killpg"):
        with contextlib.suppress(OSError):
            # the kernel keeps a pgid from being reused while the group has members, so a reaped
            # root's group is still only the worker's
            if root_reaped or os.getpgid(root_pid) == root_pid:
                os.killpg(root_pid, signal.SIGKILL)
    targets = [] if root_reaped else [(root_pid, None)]
    for pid, created in [*targets, *members]:
        if pid == os.getpid():
            continue
        proc = _same_process(pid, created)
        if proc is None:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            proc.kill()
            killed.append(pid)
    return killed


def kill_children_portable(passes: int = 10) -> list[int]:
    """SIGKILL every descendant of this process that psutil finds, until none is left."""
    me = psutil.Process()
    killed: list[int] = []
    for _ in range(passes):
        try:
            alive = [c for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
        except psutil.Error:
            break
        if not alive:
            break
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
                killed.append(child.pid)
        time.sleep(0.005)
    return killed


class PortableTree:
    """The processes of one root, read through psutil (the :class:`trainguard.process.tree.ProcessTree`
    surface: ``read``, ``pids``, ``kill``, ``close``; ``cgroup`` is always None).

    Args:
        root_pid: the worker.
        rediscover_s: how often the members are re-found.
    """

    cgroup = None

    def __init__(self, root_pid: int, *, rediscover_s: float = 1.0) -> None:
        self.root_pid = root_pid
        self.rediscover_s = rediscover_s
        self._lock = threading.Lock()
        self._closed = False
        self._procs: dict[int, psutil.Process] = {}
        self._seen: dict[int, float | None] = {}
        self._last_discovery = 0.0
        try:
            self._root: psutil.Process | None = psutil.Process(root_pid)
        except psutil.Error:
            self._root = None

    def _discover(self) -> None:
        root = self._root
        assert root is not None
        found = {root.pid: root}
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                found[child.pid] = self._procs.get(child.pid, child)
        self._procs = found
        for pid, proc in found.items():
            if pid not in self._seen:
                with contextlib.suppress(psutil.Error):
                    self._seen[pid] = proc.create_time()
        self._last_discovery = time.monotonic()

    def pids(self) -> tuple[int, ...]:
        """The members seen at the last discovery (the root alone before the first)."""
        with self._lock:
            return tuple(self._procs) if self._procs else (self.root_pid,)

    def seen(self) -> list[tuple[int, float | None]]:
        """Every member ever seen, with its start time (for the kill after the root is reaped)."""
        with self._lock:
            return list(self._seen.items())

    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        """``(rss_bytes, uss_bytes or None)`` of the tree; None when the root is not running."""
        with self._lock:
            root = self._root
            if self._closed or root is None:
                return None
            try:
                if not root.is_running() or root.status() == psutil.STATUS_ZOMBIE:
                    return None
            except psutil.Error:
                return None
            if rediscover or not self._procs or time.monotonic() - self._last_discovery >= self.rediscover_s:
                self._discover()
            rss, uss_total = 0, 0
            for pid, proc in list(self._procs.items()):
                try:
                    if uss:
                        info = proc.memory_full_info()
                        uss_total += int(getattr(info, "uss", 0))
                    else:
                        info = proc.memory_info()
                    rss += int(info.rss)
                except psutil.Error:
                    if pid == root.pid:
                        return None
                    del self._procs[pid]
            return rss, (uss_total if uss else None)

    def kill(self, *, started_after: float | None = None) -> list[int]:
        """The process group, the root and every member seen, each checked to be the process seen."""
        with self._lock:
            if self._root is not None and not self._closed:
                with contextlib.suppress(psutil.Error, AssertionError):
                    self._discover()
            members = [(p, c) for p, c in self._seen.items() if p != self.root_pid]
        return kill_group_and(self.root_pid, members)

    def end_leftovers(self) -> list[int]:
        """After the root was reaped: its process group and every member seen that still runs."""
        return kill_group_and(self.root_pid, self.seen(), root_reaped=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._procs.clear()
