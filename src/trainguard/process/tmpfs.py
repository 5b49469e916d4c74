"""Memory a trial holds in tmpfs, and the files it leaves in ``/dev/shm``.

A file in tmpfs is memory, and no RSS shows it unless it is mapped: a trial that writes 2.5 GB into
``/dev/shm`` with ``write()`` reads as a few MB, and the file stays (and holds its memory) after the
trial, after its worker, until someone removes it. :class:`TmpfsWatch` follows one worker's tree
through one trial:

- **Which files are the trial's.** Files its processes hold open on a tmpfs (``/proc/PID/fd``:
  ``/dev/shm``, a tmpfs ``/tmp``, a ``memfd``) that were not in ``/dev/shm`` when the trial began,
  and files that appeared in ``/dev/shm`` during the trial, owned by the worker's user, while this
  worker ran the run's only trial and no process outside its tree held them open when they first
  showed (a file another program is writing is that program's; with several trials at once, only a
  file one of them holds open is known to be its). trainguard's own files (``trainguard-share-...``, named by
  :mod:`trainguard._tempdirs`) are never the trial's.
- **Cheap on the watchdog's path.** Each tick costs one ``stat`` of ``/dev/shm`` (its mtime moves
  when an entry is made or removed) and one ``stat`` of each file already found (a file being
  written grows); the tree's fds and the folder are listed only when the folder changed or once a
  second (a file opened in another tmpfs).
- **Its cgroup's shmem.** Where the kernel accounts memory for the worker's cgroup, memory.stat's
  ``shmem`` holds every shmem page the worker's tree charged (mapped or not, deleted files held
  open included), read with the scan.
- **Removal.** At the trial's end, the files it made at the top of ``/dev/shm`` that are still
  there (the same inode, owned by the worker's user) are removed, unless a process outside the
  tree holds one open (every ``/proc/PID/fd`` is read, once, only when there is a file to remove).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from trainguard._tempdirs import owned_name_re

__all__ = [
    "TmpfsFile",
    "TmpfsWatch",
    "tmpfs_devices",
    "open_tmpfs_files",
    "folder_files",
    "held_outside",
    "trainguards_own",
    "cgroup_shmem_bytes",
]

logger = logging.getLogger(__name__)

SHM_FOLDER = "/dev/shm"
#: how often the tree's fds and the folder are listed when the folder has not changed
RESCAN_S = 1.0
#: the least size of a new unheld file whose holders outside the tree are looked for
OTHERS_MIN_BYTES = 1 << 20

Key = tuple[int, int]  # (st_dev, st_ino)


@dataclass(frozen=True, slots=True)
class TmpfsFile:
    """One tmpfs file: where it was found (a path, or ``/proc/PID/fd/N`` for one held open),
    its owner, the memory it occupies (allocated blocks, not its size: a sparse file holds only
    what was written), and whether the tree was seen holding it open."""

    path: str
    dev: int
    ino: int
    uid: int
    memory_bytes: int
    held: bool = False
    #: where it can be stat'ed again (its path, or the fd of the process holding it)
    probe: str = ""

    @property
    def key(self) -> Key:
        return (self.dev, self.ino)


_devices: list[frozenset[int]] = []


def tmpfs_devices() -> frozenset[int]:
    """The device numbers of this machine's tmpfs mounts (read once per process)."""
    if not _devices:
        found: set[int] = set()
        try:
            with open("/proc/self/mountinfo") as fh:
                rows = fh.read().splitlines()
        except OSError:
            rows = []
        for row in rows:
            head, _, tail = row.partition(" - ")
            if tail.split(" ", 1)[0] != "tmpfs":
                continue
            try:
                major, minor = head.split()[2].split(":")
                found.add(os.makedev(int(major), int(minor)))
            except (IndexError, ValueError):
                continue
        _devices.append(frozenset(found))
    return _devices[0]


def _file_of(path: str, probe: str, st: os.stat_result, held: bool) -> TmpfsFile:
    return TmpfsFile(path, st.st_dev, st.st_ino, st.st_uid, st.st_blocks * 512, held, probe)


def open_tmpfs_files(pids: Iterable[int], devices: frozenset[int] | None = None) -> dict[Key, TmpfsFile]:
    """The regular tmpfs files (and memfds) the processes ``pids`` hold open, each once."""
    devices = tmpfs_devices() if devices is None else devices
    found: dict[Key, TmpfsFile] = {}
    for pid in pids:
        folder = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            probe = f"{folder}/{fd}"
            try:
                st = os.stat(probe)
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in found:
                    continue
                target = os.readlink(probe) if st.st_dev in devices or st.st_nlink == 0 else ""
            except OSError:
                continue
            if st.st_dev in devices or target.startswith("/memfd:"):
                found[(st.st_dev, st.st_ino)] = _file_of(target, probe, st, True)
    return found


def folder_files(folder: str = SHM_FOLDER) -> dict[Key, TmpfsFile]:
    """The regular files at the top of ``folder``, but trainguard's own."""
    ours = owned_name_re()
    found: dict[Key, TmpfsFile] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        if ours.match(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found[(st.st_dev, st.st_ino)] = _file_of(entry.path, entry.path, st, False)
    return found


def trainguards_own(path: str) -> bool:
    """Whether a tmpfs path is trainguard's own: a file named by :mod:`trainguard._tempdirs`, or one
    inside a folder so named (``share()``'s arrays, held open by a worker while it maps them:
    counted as its trial's, a 64 MiB shared array charged a worker 64 MiB on top of its USS)."""
    ours = owned_name_re()
    return any(ours.match(part) for part in path.removesuffix(" (deleted)").split("/"))


def held_outside(keys: set[Key], tree: Iterable[int]) -> set[Key]:
    """Which of the files ``keys`` a process outside ``tree`` (and not this one) holds open."""
    skip = {*tree, os.getpid()}
    held: set[Key] = set()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return set(keys)  # unreadable: every file may be someone's
    for pid in pids:
        if pid in skip:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in keys:
                held.add((st.st_dev, st.st_ino))
    return held


def cgroup_shmem_bytes(cgroup_path: str | None) -> int | None:
    """The ``shmem`` of a cgroup's memory.stat; None where the kernel does not report it there."""
    if cgroup_path is None:
        return None
    try:
        with open(os.path.join(cgroup_path, "memory.stat"), "rb") as fh:
            for line in fh:
                if line.startswith(b"shmem "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


#: How much older than a trial's start the folder's last change must be for an unchanged mtime to
#: mean "nothing made since" (the mtime ticks at the kernel's coarse clock: 1-10 ms).
MTIME_CLEAR_NS = 50_000_000


def _mtime_ns(folder: str) -> int | None:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return None


class TmpfsWatch:
    """One worker's tmpfs memory through each of its trials (see the module's words).

    :meth:`begin` at a trial's start and :meth:`end` at its end (it removes what the trial left),
    from the session's loop; :meth:`tick` at every sample of the tree, from its watchdog thread.
    One lock keeps them apart.

    Args:
        uid: the worker's user.
        cgroup_path: a function giving the worker's cgroup folder (None without one).
        folder: the tmpfs folder whose files are diffed (``/dev/shm``).
    """

    def __init__(
        self,
        uid: int,
        *,
        cgroup_path: Callable[[], str | None] | None = None,
        folder: str = SHM_FOLDER,
        rescan_s: float = RESCAN_S,
    ) -> None:
        self.uid = uid
        self.folder = folder
        self.rescan_s = rescan_s
        self._cgroup_path = cgroup_path or (lambda: None)
        self._active = False
        self._baseline: set[Key] = set()
        self._files: dict[Key, TmpfsFile] = {}
        #: new files another process held open when first seen: theirs, never the trial's
        self._others: set[Key] = set()
        self._mtime: int | None = None
        #: the wall clock (ns) when the trial began, against which the folder's mtime is old or not
        self._began_ns = 0
        self._last_scan = 0.0
        self._sole = False
        self._lock = threading.Lock()
        self.cgroup_shmem: int | None = None

    @property
    def active(self) -> bool:
        return self._active

    @property
    def memory_bytes(self) -> int:
        """The memory the trial's tmpfs files occupy (0 between trials)."""
        return sum(f.memory_bytes for f in self._files.values()) if self._active else 0

    @property
    def files(self) -> tuple[TmpfsFile, ...]:
        return tuple(self._files.values())

    def begin(self) -> None:
        """A trial starts: what is in the folder now is not its."""
        with self._lock:
            self._begin()

    def _begin(self) -> None:
        self._began_ns = time.time_ns()
        self._mtime = _mtime_ns(self.folder)
        self._baseline = set(folder_files(self.folder))
        self._files = {}
        self._others = set()
        self._last_scan = time.monotonic()
        self._active = True

    def tick(self, pids: Iterable[int], *, sole: bool) -> None:
        """One sample: scan when the folder changed or a second passed, else re-stat the files found.
        ``sole``: the worker runs the run's only trial now (a new unheld file may be its)."""
        with self._lock:
            if self._active:
                self._tick(pids, sole)

    def _tick(self, pids: Iterable[int], sole: bool) -> None:
        self._sole = sole
        mtime = _mtime_ns(self.folder)
        if mtime != self._mtime or time.monotonic() - self._last_scan >= self.rescan_s:
            self._mtime = mtime
            self._scan(pids, sole)
            return
        for key, found in list(self._files.items()):
            try:
                st = os.stat(found.probe)
            except OSError:
                continue  # gone from that path: the next scan says whether it still exists
            if (st.st_dev, st.st_ino) == key:
                self._files[key] = replace(found, memory_bytes=st.st_blocks * 512)

    def scan(self, pids: Iterable[int], *, sole: bool) -> None:
        """List the tree's open tmpfs files and the folder's: take the trial's, drop the removed."""
        with self._lock:
            self._scan(pids, sole)

    def _scan(self, pids: Iterable[int], sole: bool) -> None:
        pids = tuple(pids)
        self._last_scan = time.monotonic()
        held = open_tmpfs_files(pids)
        listed = folder_files(self.folder)
        now: dict[Key, TmpfsFile] = {}
        for key, found in held.items():
            if key in self._baseline or trainguards_own(found.path):
                continue
            # a file in the folder keeps its path there (where it is removed from at the end)
            now[key] = replace(listed[key], held=True) if key in listed else found
        unheld = {
            key: found
            for key, found in listed.items()
            if key not in now
            and key not in self._baseline
            and key not in self._others
            and found.uid == self.uid
        }
        # a small file (a multiprocessing semaphore, made and gone in a moment) is counted as before:
        # reading every process's fds for each would cost the sampler more than it could charge
        first_seen = {
            k for k, f in unheld.items() if k not in self._files and f.memory_bytes >= OTHERS_MIN_BYTES
        }
        if sole and first_seen:
            # a file another process holds open as it first shows (one being written: another run's
            # trial, another job of this user) is theirs: counted, it charged this trial (and stopped
            # a run as "alone over the budget") for memory another program wrote
            self._others |= held_outside(first_seen, pids)
        for key, found in unheld.items():
            before = self._files.get(key)
            if before is not None or (sole and key not in self._others):
                now[key] = replace(found, held=before.held) if before is not None else found
        self._files = now
        self.cgroup_shmem = cgroup_shmem_bytes(self._cgroup_path())

    def _unchanged_and_empty(self) -> bool:
        """Whether the trial cannot have left a file to remove, without reading the tree's fds:
        none seen so far and the folder unchanged since it was last read, with that reading at
        least :data:`MTIME_CLEAR_NS` older than the trial's start (a directory's mtime ticks at
        the kernel's coarse clock, a few ms: a file made right after a change could keep the mtime)."""
        if self._files or self._mtime is None:
            return False
        return _mtime_ns(self.folder) == self._mtime and self._began_ns - self._mtime >= MTIME_CLEAR_NS

    def end(self, pids: Iterable[int] = (), *, remove: bool = True) -> list[TmpfsFile]:
        """The trial ended: remove the files it made at the top of the folder; return them.
        ``remove=False``: it goes on elsewhere (a staged trial's next stage), its files are kept."""
        pids = tuple(pids)
        with self._lock:
            if not self._active:
                return []
            if not remove or self._unchanged_and_empty():
                self._active, self._files = False, {}
                return []
            self._scan(pids, self._sole)
            self._active = False
            candidates = {
                key: found
                for key, found in self._files.items()
                # only a file the tree was seen holding open: a new unheld file counts toward the
                # trial's memory (it may be the trial's), but may be another program's to keep
                if os.path.dirname(found.path) == self.folder and found.uid == self.uid and found.held
            }
            self._files = {}
        if not candidates:
            return []
        kept = held_outside(set(candidates), pids)
        removed: list[TmpfsFile] = []
        for key, found in candidates.items():
            if key in kept:
                logger.info("%s is held open outside the trial's tree: left in place", found.path)
                continue
            try:
                st = os.lstat(found.path)
                if (st.st_dev, st.st_ino) != key or st.st_uid != self.uid:
                    continue  # replaced since: not the trial's file
                os.unlink(found.path)
            except OSError:
                continue
            removed.append(found)
        return removed
