"""Whether a run the store says is ``running`` still has a supervisor: one that holds its run lock
(:mod:`trainguard.store._lock`). A supervisor killed with SIGKILL records no end, so without this
``runs`` and ``show`` would list its run as running forever.

The probe opens the lock file read-only (a reader in a shared folder may not write it), and takes
and drops a shared ``flock`` at once: it succeeds only when no supervisor holds the lock. The file
still names its last holder (a release unlinks it, a killed holder cannot).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

__all__ = ["interrupted_note"]


def interrupted_note(store_path: Path, name: str, status: str) -> str | None:
    """For a ``running`` run no supervisor holds: ``"interrupted: supervisor pid N is gone; run it
    again to resume"``; None while one holds it, or for a run in any other status."""
    if status != "running":
        return None
    from trainguard.store._lock import RunLock

    path = RunLock(store_path, name, str(store_path)).path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return "interrupted: its supervisor is gone; run it again to resume"
    except OSError:
        return None  # cannot tell: say nothing rather than something wrong
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None  # held: a supervisor is running it
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        try:
            holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            holder = {}
    finally:
        os.close(fd)
    pid = holder.get("pid") if isinstance(holder, dict) else None
    who = f"supervisor pid {pid}" if isinstance(pid, int) else "its supervisor"
    return f"interrupted: {who} is gone; run it again to resume"
