"""Process trees: find every process a root started and read their memory from ``/proc``.

With :mod:`trainguard.process.cgroup` (keeping a tree together) and :mod:`trainguard.process.kill`
(ending it), this module alone owns those jobs; the runner, the leak check, the sampler, ``scope``
and the host probes call it.

**Finding.** Descendants are found by walking ``/proc/PID/task/*/children`` from the root (only
this tree's files; ``psutil.Process.children`` scans every process on the machine). A process that
detaches (double fork, ``setsid``) is re-parented to the nearest *child subreaper* above it, so a
root that called :func:`become_subreaper` keeps every descendant under it, however it detached.
Where a cgroup v2 can be made (:meth:`TreeCgroup.create`), its ``cgroup.procs`` lists every member
even after the root died, and ``cgroup.kill`` ends them all at once.

**Reading.** RSS comes from ``/proc/PID/statm`` (one short read; :class:`ProcessTree` keeps the fds
open, one ``pread`` per process per sample); its split by kind (anonymous, file-backed, shmem:
:class:`~trainguard.process.charge.MemorySplit`) from ``/proc/PID/status`` (ten times the cost,
read only when a sample needs it); USS and PSS from ``/proc/PID/smaps_rollup`` (costs more, read
only when asked). Off Linux everything falls back to psutil.

**Ending.** :func:`kill_tree` sends SIGKILL to the cgroup (when there is one), the root's process
group, every descendant found, and any earlier-seen pid that is still the same process (start
time checked, so a reused pid is never hit).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from trainguard.process.charge import MemorySplit

if TYPE_CHECKING:
    from trainguard.process.cgroup import TreeCgroup

__all__ = [
    "PAGE_SIZE",
    "HAVE_PROC",
    "statm_rss_bytes",
    "smaps_rollup_bytes",
    "status_split",
    "children",
    "descendants",
    "unexeced_fork_parent",
    "fork_charge_bytes",
    "start_time",
    "ProcessTree",
]

logger = logging.getLogger(__name__)

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
HAVE_PROC = os.path.exists("/proc/self/statm")
_HAVE_CHILDREN = HAVE_PROC and os.path.exists(f"/proc/self/task/{os.getpid()}/children")
#: The most processes one tree walk collects (a fork bomb must not stall the sampler).
MAX_TREE = 4096


# -- reading --------------------------------------------------------------------------------------


def statm_rss_bytes(pid: int) -> int | None:
    """The resident set size of ``pid`` (None when it is gone): one read of ``/proc/PID/statm``."""
    if HAVE_PROC:
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                return int(fh.read().split()[1]) * PAGE_SIZE
        except (OSError, ValueError, IndexError):
            return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


@dataclass(frozen=True, slots=True)
class SmapsRollup:
    """USS (private pages) and PSS (shared pages divided among their users) of one process."""

    uss_bytes: int
    pss_bytes: int


def smaps_rollup_bytes(pid: int) -> SmapsRollup | None:
    """USS and PSS of ``pid`` from ``/proc/PID/smaps_rollup`` (psutil off Linux); None when unreadable."""
    if not HAVE_PROC:
        try:
            info = psutil.Process(pid).memory_full_info()
            return SmapsRollup(int(info.uss), int(getattr(info, "pss", info.uss)))
        except (psutil.Error, AttributeError, OSError):
            return None
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            uss = pss = 0
            for line in fh:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:", b"Private_Hugetlb:")):
                    uss += int(line.split()[1]) * 1024
                elif line.startswith(b"Pss:"):
                    pss += int(line.split()[1]) * 1024
            return SmapsRollup(uss, pss)
    except (OSError, ValueError, IndexError):
        return None


_STATUS_KEYS = (b"RssAnon:", b"RssFile:", b"RssShmem:")


def status_split(pid: int) -> tuple[int, int, int] | None:
    """``(anonymous, file-backed, shmem)`` resident bytes of ``pid`` from ``/proc/PID/status``
    (one read); None when it is gone, or for a process without an address space (a zombie, a
    kernel thread: no ``Rss*`` lines)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    out = []
    for key in _STATUS_KEYS:
        at = data.find(key)
        if at < 0:
            return None
        try:
            out.append(int(data[at + len(key) : data.index(b"kB", at)]) * 1024)
        except ValueError:
            return None
    return out[0], out[1], out[2]


# -- finding --------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (of all its threads)."""
    if not _HAVE_CHILDREN:
        try:
            return [c.pid for c in psutil.Process(pid).children()]
        except psutil.Error:
            return []
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


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (not ``pid`` itself), each once, parents before their children.

    Each pid is listed once even when two of a parent's threads list it (a child moves to another
    thread's ``children`` file when the thread that forked it exits, which can happen between the
    two reads): a pid listed twice would have its memory summed twice.
    """
    pids = [pid]
    seen = {pid}
    i = 0
    while i < len(pids) and len(pids) < MAX_TREE:
        for child in children(pids[i]):
            if child not in seen:
                seen.add(child)
                pids.append(child)
        i += 1
    return pids[1:]


# -- a fork that has not called exec yet ----------------------------------------------------------
#
# Between fork() and exec() a child maps its parent's pages: its RSS (statm) counts every page the
# parent has resident, although none is new memory (copy-on-write), and a vfork() child (what
# Python's subprocess and posix_spawn use) even shares the parent's address space, so its statm is
# the parent's. A 10 Hz sample that lands in that window read a TensorFlow worker starting
# `uname -p` as about twice its size. Such a child is charged what it owns: nothing while it shares
# the address space, its private pages (USS) after a plain fork. It is recognised by its address
# space layout (stack, brk, argument and environment addresses, randomised at every exec) being
# its parent's.

#: syscall numbers of kcmp(2), which tells whether two processes share one address space
_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272, "i686": 349, "i386": 349}
_KCMP_VM = 1
_kcmp_fn: list = []


def _layout(pid: int) -> tuple[int, tuple[int, int, int, int] | None] | None:
    """``(ppid, (startstack, start_brk, arg_start, env_start) or None)`` of ``pid``, None if gone.
    The layout is None when the kernel hides it (another user's process, a kernel thread)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        fields = data[data.rindex(b")") + 2 :].split()
        ppid = int(fields[1])
        # fields 28 (startstack), 47 (start_brk), 48 (arg_start), 50 (env_start), from field 3 on
        layout = (int(fields[25]), int(fields[44]), int(fields[45]), int(fields[47]))
    except (OSError, ValueError, IndexError):
        return None
    return ppid, (layout if any(layout) else None)


def _same_address_space(pid_a: int, pid_b: int) -> bool | None:
    """Whether two processes share one address space (a vfork child and its parent), by kcmp(2);
    None where that cannot be asked."""
    if not _kcmp_fn:
        number = _KCMP_SYSCALL.get(os.uname().machine)
        fn = None
        if number is not None:
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                fn = (libc.syscall, number)
            except (OSError, AttributeError):
                fn = None
        _kcmp_fn.append(fn)
    fn = _kcmp_fn[0]
    if fn is None:
        return None
    result = fn[0](fn[1], pid_a, pid_b, _KCMP_VM, 0, 0)
    return None if result < 0 else result == 0


def unexeced_fork_parent(pid: int) -> int | None:
    """The parent of ``pid`` when ``pid`` is a fork of it that has not called exec yet, else None."""
    own = _layout(pid)
    if own is None or own[1] is None or own[0] <= 1:
        return None
    parent = _layout(own[0])
    if parent is None or parent[1] != own[1]:
        return None
    return own[0]


def fork_charge_bytes(pid: int, parent: int) -> int:
    """What an unexeced fork ``pid`` of ``parent`` is charged: 0 while it shares its parent's
    address space (vfork), its private memory (USS) after a plain fork."""
    if _same_address_space(pid, parent) is not False:
        # shared (vfork), or unknown: its pages are the parent's, already counted with the parent
        return 0
    rollup = smaps_rollup_bytes(pid)
    return rollup.uss_bytes if rollup is not None else 0


def start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


# -- a tree read many times -----------------------------------------------------------------------


class ProcessTree:
    """The processes of one root, read many times a second: RSS (and USS on request) summed.

    The set of processes is re-found at most every ``rediscover_s`` (from the cgroup when there is
    one, else by walking children), and each process's ``statm`` stays open between reads. Safe to
    share between threads: its fds are opened, read and closed only by this object, under its lock,
    and ``close`` makes later reads return None.

    Args:
        root_pid: the root (a worker).
        rediscover_s: how often the set of processes is re-read.
        cgroup: the root's :class:`TreeCgroup`, when it has one.
    """

    def __init__(self, root_pid: int, *, rediscover_s: float = 1.0, cgroup: TreeCgroup | None = None) -> None:
        self.root_pid = root_pid
        self.rediscover_s = rediscover_s
        self.cgroup = cgroup
        self._fds: dict[int, int] = {}
        # members that were a fork of their parent with no exec yet, at the last look: pid -> parent
        self._forks: dict[int, int] = {}
        self._last_discovery = 0.0
        self._lock = threading.Lock()
        self._closed = False

    def _discover(self) -> None:
        members = self.cgroup.pids() if self.cgroup is not None else []
        if self.root_pid in members:
            # the cgroup holds the whole tree, detached processes included: one read, no walk
            pids = [self.root_pid, *(p for p in members if p != self.root_pid)]
        else:  # no cgroup, or the root has not joined it yet
            pids = [self.root_pid, *descendants(self.root_pid)]
            pids.extend(p for p in members if p not in pids)
        current = set(pids)
        for pid in list(self._fds):
            if pid not in current:
                self._forget(pid)
        for pid in pids:
            if pid not in self._fds:
                try:
                    self._fds[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    continue
                if pid != self.root_pid:
                    parent = unexeced_fork_parent(pid)
                    if parent is not None:
                        self._forks[pid] = parent
        self._last_discovery = time.monotonic()

    def _forget(self, pid: int) -> None:
        self._forks.pop(pid, None)
        fd = self._fds.pop(pid)
        try:
            os.close(fd)
        except OSError as err:  # only ever ours: EBADF here means someone else closed our fd
            logger.warning("closing the statm fd %d of pid %d failed: %s", fd, pid, err)

    def pids(self) -> tuple[int, ...]:
        """The processes seen at the last discovery (the root alone before the first)."""
        with self._lock:
            return tuple(self._fds) if self._fds else (self.root_pid,)

    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        """``(rss_bytes, uss_bytes or None)`` of the tree, or None when the root is not running
        (gone, or exited and not yet reaped)."""
        if not HAVE_PROC:
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
                    if pid in self._forks:
                        # a fork not exec'd yet maps its parent's pages: charge what it owns
                        if unexeced_fork_parent(pid) is not None:
                            rss += fork_charge_bytes(pid, self._forks[pid])
                            continue
                        del self._forks[pid]  # it has called exec since: its RSS is its own
                    rss += resident * PAGE_SIZE
                    # a process without an address space (size 0: a zombie, exited but not yet
                    # reaped) is not running: its zeros are no reading of the worker
                    if pid == self.root_pid and size > 0:
                        root_alive = True
                except (OSError, ValueError, IndexError):
                    # the process ended (ESRCH on a stale fd): drop it, it holds no memory now
                    self._forget(pid)
            if not root_alive:
                return None
            uss_total: int | None = None
            if uss:
                values = [smaps_rollup_bytes(pid) for pid in self._fds]
                uss_total = None if any(v is None for v in values) else sum(v.uss_bytes for v in values if v)
            return rss, uss_total

    def split(self, *, tmpfs_bytes: int = 0, cgroup_shmem_bytes: int | None = None) -> MemorySplit | None:
        """The tree's resident pages by kind (``/proc/PID/status`` of each process seen at the last
        read), with the tmpfs readings given; None off Linux or when the root is gone. A fork that
        has not called exec yet is charged what :meth:`read` charges it, as anonymous pages."""
        if not HAVE_PROC:
            return None
        with self._lock:
            if self._closed:
                return None
            members = list(self._fds)
            forks = dict(self._forks)
        anon = file = shmem = 0
        for pid in members:
            if pid in forks and unexeced_fork_parent(pid) is not None:
                anon += fork_charge_bytes(pid, forks[pid])
                continue
            kinds = status_split(pid)
            if kinds is None:
                if pid == self.root_pid:
                    return None
                continue  # it ended since the last read: it holds nothing now
            anon, file, shmem = anon + kinds[0], file + kinds[1], shmem + kinds[2]
        return MemorySplit(anon, file, shmem, tmpfs_bytes, cgroup_shmem_bytes)

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

    def kill(self, *, started_after: float | None = None) -> list[int]:
        """:func:`~trainguard.process.kill.kill_tree` of the root, its cgroup and every process this
        tree has seen."""
        from trainguard.process.kill import kill_tree

        return kill_tree(self.root_pid, cgroup=self.cgroup, known=self.pids(), started_after=started_after)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for fd in self._fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()
