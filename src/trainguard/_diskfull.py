"""A full disk under the store or a run's checkpoints: how it is recognised and said.

A write that fails for lack of space is not the trial's fault and not a reason to go on: every
next trial, checkpoint and store row would fail the same way. The run stops (status
``disk_full``), the half-written checkpoint is removed, and one line says which file system
filled up, how full it is and what to do; the run resumes from its committed checkpoints once
space is freed.

Recognising it. The kernel says ``ENOSPC`` (or ``EDQUOT``, a quota), SQLite says "database or
disk is full" (``SQLITE_FULL``), but numpy's ``np.save`` reports a short write as
``OSError("N requested and M written")`` with no errno. So a failed write counts as the disk
filling up when its errno says so, or when it carries no errno, and in both cases only when the
file system of the checkpoints is (nearly) full at that moment (under :data:`LOW_FREE_BYTES`):
a trial that fills some other disk of its own fails as any trial does.

The decisions (:func:`write_failure`, :func:`is_disk_full`) are pure; :func:`free_bytes` and
:func:`describe` read the file system.
"""

from __future__ import annotations

import errno
import os
from typing import Any

__all__ = [
    "FULL_ERRNOS",
    "LOW_FREE_BYTES",
    "RESERVE_BYTES",
    "write_failure",
    "is_disk_full",
    "sqlite_full",
    "free_bytes",
    "describe",
]

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: a file system with less free than this after a failed write is the one that filled up
LOW_FREE_BYTES = 1 << 20
#: what a run keeps allocated beside its store (in its lock file) so that a full disk can still
#: record how the run ended: a few store transactions of a few pages each
RESERVE_BYTES = 1 << 20
_SQLITE_FULL = 13


def write_failure(exc: BaseException | None) -> dict[str, Any] | None:
    """``{"errno": N or None}`` for the first ``OSError`` in an exception's chain (its cause and
    context, as a traceback shows them), or a ``CheckpointError`` that carries one; None when no
    write failed."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            return {"errno": exc.errno}
        number = getattr(exc, "errno", None)
        if getattr(exc, "write_failed", False):
            return {"errno": number if isinstance(number, int) else None}
        exc = exc.__cause__ or exc.__context__
    return None


def is_disk_full(failure: dict[str, Any] | None, free: int | None) -> bool:
    """Whether a failed write (:func:`write_failure`) was the checkpoints' file system filling up,
    given what it had free right after the failure (before anything was cleaned up)."""
    if failure is None or free is None or free >= LOW_FREE_BYTES:
        return False
    number = failure.get("errno")
    return number is None or number in FULL_ERRNOS


def sqlite_full(err: BaseException) -> bool:
    """Whether an ``sqlite3`` error is SQLite's "database or disk is full"."""
    code = getattr(err, "sqlite_errorcode", None)  # Python 3.11+
    return code == _SQLITE_FULL or "database or disk is full" in str(err)


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes of the file system holding ``path`` (or its nearest existing folder), or None
    (also for one of no size: /proc and /sys say 0 of 0, which is not a full disk)."""
    here = os.path.abspath(os.fspath(path))
    while True:
        try:
            st = os.statvfs(here)
            return st.f_bavail * st.f_frsize if st.f_blocks else None
        except FileNotFoundError:
            parent = os.path.dirname(here)
            if parent == here:
                return None
            here = parent
        except OSError:
            return None


def describe(
    path: str | os.PathLike[str], what: str, *, free: int | None = None, event: str = "is full"
) -> str:
    """``"the disk under F (what) is full (X free of Y)"``, F the nearest existing folder of
    ``path``; ``free`` is what a failed write saw (before its files were cleaned up), else now."""
    from trainguard.units import format_bytes

    here = os.path.abspath(os.fspath(path))
    while not os.path.isdir(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    try:
        st = os.statvfs(here)
        left = st.f_bavail * st.f_frsize if free is None else free
        room = f" ({format_bytes(left)} free of {format_bytes(st.f_blocks * st.f_frsize)})"
    except OSError:
        room = ""
    return f"the disk under {here} ({what}) {event}{room}"
