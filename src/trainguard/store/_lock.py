"""One supervisor per run: an exclusive lock per (store, run name) while a supervisor runs it.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on a small file in a folder beside the store
(``runs.db.locks/<hash of the run name>.lock``). The kernel holds it for the open file and drops it
when the holder's process ends in any way, SIGKILL included, so a dead holder needs no detection
heuristics (pid checks can be fooled by pid reuse, heartbeats by a paused machine): the next
supervisor simply gets the lock. The holder writes its pid, host and start time into the file, so
a supervisor that is refused can say who holds the run, and one that takes over can say whose
lock it inherited. Releasing unlinks the file while still holding it; an acquirer checks that the
file it locked is still the one at the path (the classic lock-file race), so no file is left per
finished run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import socket
import time
from pathlib import Path

from trainguard.exceptions import RunLockedError, StoreError

__all__ = ["RunLock", "lock_folder"]

logger = logging.getLogger(__name__)

#: the part of a lock file its readers read: the holder's JSON (padded with spaces when a reserve follows)
_HOLDER_BYTES = 4096


def lock_folder(store_path: Path) -> Path:
    """The folder that holds the run locks of the store at ``store_path``."""
    return store_path.with_name(store_path.name + ".locks")


def _describe(holder: dict[str, object]) -> str:
    since = holder.get("since")
    when = (
        dt.datetime.fromtimestamp(float(since), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        if isinstance(since, (int, float))
        else "an unknown time"
    )
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since {when}"


class RunLock:
    """Holds the lock of one run of one store until :meth:`release` (idempotent)."""

    def __init__(self, store_path: Path, name: str, shown: str, *, reserve_bytes: int = 0) -> None:
        self.store_path = store_path
        #: bytes kept allocated in the lock file past its first 4 KiB (its holder's JSON, padded)
        #: until :meth:`free_reserve`: room to record the run's end on a full disk
        self.reserve_bytes = reserve_bytes
        self.name = name
        self._shown = shown
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:20]
        self.path = lock_folder(store_path) / f"run-{digest}.lock"
        self._fd: int | None = None
        #: the holder whose lock this one took over (its process had ended), or None
        self.previous_holder: dict[str, object] | None = None

    def acquire(self) -> RunLock:
        """Take the lock.

        Raises:
            RunLockedError: another live supervisor runs this run (names its pid, host, start).
        """
        folder = self.path.parent
        for _ in range(50):
            try:
                with contextlib.suppress(FileExistsError):
                    folder.mkdir(mode=0o755)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:  # the folder was removed meanwhile by a releasing holder
                continue
            except OSError as err:
                raise StoreError(
                    f"cannot lock run {self.name!r} of store {self._shown}: {self.path}: {err.strerror}: "
                    "the store's folder must be writable",
                    path=self._shown,
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = self._read(fd)
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                who = _describe(holder) if holder else "a process that has not written its name yet"
                raise RunLockedError(
                    f"run {self.name!r} in store {self._shown} is being run by another supervisor "
                    f"({who}): wait for it to finish, stop it, or pass another run name",
                    pid=holder.get("pid") if holder else None,
                    host=holder.get("host") if holder else None,
                    since=holder.get("since") if holder else None,
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
            except OSError:
                same = False
            if not same:  # released (unlinked) between our open and our lock: lock the new file
                os.close(fd)
                continue
            previous = self._read(fd)
            if previous:
                self.previous_holder = previous
                logger.warning(
                    "run %s: took over the lock of a supervisor that is gone (%s)",
                    self.name,
                    _describe(previous),
                )
            me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "run": self.name}
            try:
                self._write_holder(fd, json.dumps(me).encode())
            except BaseException:
                self._fd = fd
                self.release()  # unlinked while held, as a release does: no lock file is left
                raise
            self._fd = fd
            return self
        raise RunLockedError(f"run {self.name!r} in store {self._shown}: its lock file keeps changing; retry")

    def _write_holder(self, fd: int, data: bytes) -> None:
        """The holder's JSON; with a reserve, padded to 4 KiB (readers read 4 KiB) and the reserve
        allocated after it."""
        from trainguard.store._full import allocate_reserve, store_full_error

        os.ftruncate(fd, 0)
        if self.reserve_bytes:
            data = data.ljust(_HOLDER_BYTES)
        try:
            os.pwrite(fd, data, 0)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise store_full_error(self._shown, self.store_path) from None
            raise
        allocate_reserve(fd, len(data), self.reserve_bytes, self._shown, self.store_path)

    def free_reserve(self) -> bool:
        """Give the reserve back to the file system (the disk filled up); True when there was one."""
        if self._fd is None or not self.reserve_bytes:
            return False
        try:
            os.ftruncate(self._fd, _HOLDER_BYTES)
        except OSError:
            return False
        self.reserve_bytes = 0
        return True

    @staticmethod
    def _read(fd: int) -> dict[str, object] | None:
        try:
            data = os.pread(fd, 4096, 0)
            value = json.loads(data.decode("utf-8")) if data else None
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still locked: nobody can hold a file that is not at the path
        os.close(fd)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # only when no other run is locked

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
