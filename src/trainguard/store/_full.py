"""The store's side of a full disk: SQLite's "database or disk is full" as one line that says
which disk and what to do (:class:`~trainguard.exceptions.DiskFullError`), and the reserve a
run's lock keeps so that the end of a run can still be recorded (:mod:`trainguard._diskfull`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from trainguard._diskfull import FULL_ERRNOS, describe, free_bytes
from trainguard.exceptions import DiskFullError

__all__ = ["store_full_error", "allocate_reserve"]


def store_full_error(shown: str, path: Path) -> DiskFullError:
    """A write of the store at ``path`` failed because its disk is full."""
    what = describe(path, f"the store {shown}")
    return DiskFullError(
        f"cannot write store {shown}: {what}: free space there, or put the store on a larger disk",
        path=shown,
        free_bytes=free_bytes(path),
        what=what,
    )


def allocate_reserve(fd: int, offset: int, size: int, shown: str, path: Path) -> None:
    """Make ``size`` bytes from ``offset`` of the file ``fd`` really allocated (not a sparse hole).

    Raises:
        DiskFullError: the disk has less free than that.
    """
    if size <= 0:
        return
    try:
        try:
            os.posix_fallocate(fd, offset, size)
        except OSError as err:
            if err.errno in FULL_ERRNOS:
                raise
            # a file system without fallocate (EOPNOTSUPP, EINVAL): write the bytes
            block = b"\0" * (1 << 16)
            for start in range(offset, offset + size, len(block)):
                os.pwrite(fd, block[: min(len(block), offset + size - start)], start)
    except OSError as err:
        if err.errno not in FULL_ERRNOS and err.errno != errno.EFBIG:
            raise
        os.ftruncate(fd, offset)
        what = describe(path, f"the store {shown}", event="has too little room")
        raise DiskFullError(
            f"cannot start a run in store {shown}: {what}, less than the {size >> 20} MiB a run keeps "
            "in reserve to record how it ends: free space there, or put the store on a larger disk",
            path=shown,
            free_bytes=free_bytes(path),
            what=what,
        ) from None
