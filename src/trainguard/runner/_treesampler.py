"""A cheap reader of one worker's process-tree memory, for sampling at 10 Hz from a thread.

``psutil.Process.children(recursive=True)`` scans every process on the machine; at 10 Hz that alone
costs several percent of a core. Here the tree is re-discovered at most once a second from
``/proc/PID/task/*/children`` (only this tree's files), and RSS is read from ``/proc/PID/statm``
through file descriptors kept open (one ``pread`` per process per sample). USS (private pages from
``smaps_rollup``) costs more and is read only when asked. Off Linux it falls back to psutil.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import psutil

__all__ = ["TreeSampler", "kill_tree"]

logger = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HAVE_PROC = os.path.exists("/proc/self/statm")


def _children_of(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return found


def _uss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            total = 0
            for line in fh:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:", b"Private_Hugetlb:")):
                    total += int(line.split()[1]) * 1024
            return total
    except (OSError, ValueError, IndexError):
        return None


class TreeSampler:
    """Reads RSS (and optionally USS) of ``root_pid`` and its descendants.

    Safe to share between threads: its statm fds are opened, read and closed only by this object,
    under its lock, and ``close`` makes later reads return None.

    Args:
        root_pid: the worker's pid.
        rediscover_s: how often the set of descendants is re-read.
    """

    def __init__(self, root_pid: int, *, rediscover_s: float = 1.0) -> None:
        self.root_pid = root_pid
        self.rediscover_s = rediscover_s
        self._fds: dict[int, int] = {}
        self._last_discovery = 0.0
        self._lock = threading.Lock()
        self._closed = False

    def _discover(self) -> None:
        pids = [self.root_pid]
        i = 0
        while i < len(pids) and len(pids) < 4096:
            pids.extend(_children_of(pids[i]))
            i += 1
        current = set(pids)
        for pid in list(self._fds):
            if pid not in current:
                self._forget(pid)
        for pid in pids:
            if pid not in self._fds:
                try:
                    self._fds[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
                except OSError:
                    continue
        self._last_discovery = time.monotonic()

    def _forget(self, pid: int) -> None:
        fd = self._fds.pop(pid)
        try:
            os.close(fd)
        except OSError as err:  # only ever ours: EBADF here means someone else closed our fd
            logger.warning("closing the statm fd %d of pid %d failed: %s", fd, pid, err)

    def pids(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(self._fds) if self._fds else (self.root_pid,)

    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        """Return ``(rss_bytes, uss_bytes or None)`` of the tree, or None when the root is not running
        (gone, or exited and not yet reaped)."""
        if not _HAVE_PROC:
            return self._read_psutil(uss)
        with self._lock:
            if self._closed:
                return None
            if rediscover or not self._fds or time.monotonic() - self._last_discovery >= self.rediscover_s:
                self._discover()
            rss = 0
            root_alive = False
            for pid, fd in list(self._fds.items()):
                try:
                    fields = os.pread(fd, 128, 0).split()
                    size, resident = int(fields[0]), int(fields[1])
                    rss += resident * _PAGE
                    # a process without an address space (size 0: a zombie, exited but not yet
                    # reaped) is not running: its zeros are no reading of the worker
                    if pid == self.root_pid and size > 0:
                        root_alive = True
                except (OSError, ValueError, IndexError):
                    # the process ended (ESRCH on a stale fd): drop it, it holds no memory now.
                    # This sampler alone opened and closes these fds, always under its lock.
                    self._forget(pid)
            if not root_alive:
                return None
            uss_total: int | None = None
            if uss:
                values = [_uss_bytes(pid) for pid in self._fds]
                uss_total = None if any(v is None for v in values) else sum(v or 0 for v in values)
            return rss, uss_total

    def _read_psutil(self, uss: bool) -> tuple[int, int | None] | None:
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        rss, uss_total = 0, 0
        for proc in procs:
            try:
                if uss:
                    info = proc.memory_full_info()
                    uss_total += getattr(info, "uss", 0)
                else:
                    info = proc.memory_info()
                rss += info.rss
            except psutil.Error:
                continue
        return rss, (uss_total if uss else None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for fd in self._fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds.clear()


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid``, its process group when it leads one, and every descendant."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = []
    killed: list[int] = []
    try:
        # a worker leads its own process group: this also reaches children that left the tree
        if os.getpgid(pid) == pid:
            os.killpg(pid, 9)
    except OSError:
        pass
    for proc in procs:
        try:
            proc.kill()
            killed.append(proc.pid)
        except psutil.Error:
            continue
    if not procs:
        try:
            os.kill(pid, 9)
            killed.append(pid)
        except OSError:
            pass
    return killed
