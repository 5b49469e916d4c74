"""The store's file before SQLite opens it: a path that can be a store (not a folder, a FIFO, a
missing folder, an unwritable one, another user's), a header that is SQLite's, the journal its
filesystem allows, and whether a reader must read it as immutable (a mixin of
:class:`~trainguard.store.Store`)."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

from trainguard._diskfull import sqlite_full
from trainguard.exceptions import ConfigError, StoreError

__all__ = ["StoreFile"]

logger = logging.getLogger("trainguard.store._store")

_SQLITE_HEADER = b"SQLite format 3\x00"
# how long a reader waits for an empty store file to gain its first page (a run creating it)
_EMPTY_STORE_WAIT_S = 2.0


def _read_header(path: Path, shown: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_HEADER))
    except OSError as err:
        raise StoreError(
            f"cannot read store {shown}: {err.strerror}: fix its permissions or pass another --store",
            path=shown,
        ) from err


def _wal_has_commits(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


def _special_file_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (``"a FIFO"``)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


class StoreFile:
    """Checks of the store's file (a mixin: the Store sets these attributes)."""

    _path: Path
    _shown: str
    _readonly: bool

    def _check_path(self) -> None:
        path, shown = self._path, self._shown
        if path.is_dir():
            raise ConfigError(
                f"store {shown} is a folder: pass a file path such as {shown.rstrip('/')}/runs.db"
            )
        kind = _special_file_kind(path)
        if kind is not None:  # opening a FIFO to read its header would wait for a writer forever
            raise ConfigError(
                f"store {shown} is {kind}, not a file: pass a file path such as runs.db", path=shown
            )
        parent = path.absolute().parent
        if self._readonly:
            if not path.exists():
                raise StoreError(
                    f"no store at {shown}: run something first (trainguard run / Runner(store=...)) "
                    f"or pass the store you used with --store",
                    path=shown,
                )
        else:
            if parent.exists() and not parent.is_dir():
                raise ConfigError(
                    f"cannot create store {shown}: {parent} is a file, not a folder: pass a --store path inside a folder",
                    path=shown,
                )
            if not parent.exists():
                raise ConfigError(
                    f"cannot create store {shown}: the folder {parent} does not exist: create it "
                    f"(mkdir -p {parent}) or pass another --store",
                    path=shown,
                )
            if not path.exists() and not os.access(parent, os.W_OK):
                raise StoreError(self._not_writable_message(), path=shown)
            if path.exists() and not os.access(path, os.W_OK):
                raise StoreError(self._not_writable_message(), path=shown)
        from trainguard.store._trust import untrusted_store

        refusal = untrusted_store(path, shown, readonly=self._readonly)
        if refusal is not None:
            raise StoreError(refusal, path=shown)
        if path.exists():
            self._check_header()

    def _check_header(self) -> None:
        """A file that is there must be SQLite; an empty one only while a run is creating it.

        In WAL mode the schema a new run writes sits in the ``-wal`` file until a checkpoint, so
        the main file stays empty for a while: a reader then is not looking at junk."""
        path, shown = self._path, self._shown
        deadline = time.monotonic() + (_EMPTY_STORE_WAIT_S if self._readonly else 0.0)
        while True:
            header = _read_header(path, shown)
            if header and header != _SQLITE_HEADER:
                raise StoreError(self._not_sqlite_message(), path=shown)
            if header or not self._readonly or _wal_has_commits(path):
                return
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"store {shown} is an empty file, not a trainguard store: pass the store you ran with (--store)",
                    path=shown,
                )
            time.sleep(0.05)

    def _choose_journal(self, journal: str) -> str:
        """WAL on a local disk, the rollback journal on a network filesystem (see ``_fs``)."""
        from trainguard.store import _fs

        f_type = _fs.statfs_type(str(self._path))
        mode = _fs.choose_journal(journal, f_type, self._shown)
        network = _fs.network_filesystem(f_type)
        if network is not None and not self._readonly:
            logger.info(
                "store %s is on %s: SQLite's rollback journal with one writer (WAL is unsafe there)",
                self._shown,
                network,
            )
        return mode

    def _disk_full(self, err: sqlite3.Error) -> bool:
        """SQLite's "disk is full", or an open that failed (it cannot make its -wal/-shm files, and
        says "unable to open" or "disk I/O error") on a disk with (nearly) nothing free."""
        from trainguard._diskfull import LOW_FREE_BYTES, free_bytes

        if self._readonly:
            return False
        free = free_bytes(self._path)
        return sqlite_full(err) or (free is not None and free < LOW_FREE_BYTES)

    def _not_writable_message(self) -> str:
        parent = self._path.absolute().parent
        return (
            f"cannot write store {self._shown}: the folder {parent} (or the file) is not writable: pass a "
            f"--store in a writable folder, e.g. --store ~/trainguard.db"
        )

    def _not_sqlite_message(self) -> str:
        return (
            f"{self._shown} is not a trainguard store (not an SQLite database): pass another --store; "
            f"the file was left untouched"
        )

    def _can_read_immutable(self) -> bool:
        wal = self._path.with_name(self._path.name + "-wal")
        try:
            wal_bytes = wal.stat().st_size
        except FileNotFoundError:
            wal_bytes = 0
        except OSError:
            return False
        if wal_bytes:
            return False
        # a reader that is not the store's owner reads it as it is, creating no -wal/-shm files:
        # in a shared (sticky) folder the owner could not delete those, and its next run would fail;
        # on a full disk a reader cannot grow its -shm file, and no writer can commit anything
        from trainguard._diskfull import LOW_FREE_BYTES, free_bytes

        free = free_bytes(self._path)
        return (
            not os.access(self._path.absolute().parent, os.W_OK)
            or not self._owned_by_me()
            or (free is not None and free < LOW_FREE_BYTES)
        )

    def _owned_by_me(self) -> bool:
        try:
            return self._path.stat().st_uid == os.geteuid()
        except OSError:
            return True
