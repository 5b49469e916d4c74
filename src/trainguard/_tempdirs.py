"""Temporary folders (and files) named for the process that owns them, and the sweep of those
whose owner is gone.

Every temporary thing trainguard makes outside a store's folder is named
``trainguard-<kind>-<pid>-<start ticks>-<random>``: the owner's pid and its start time in clock
ticks since boot (field 22 of ``/proc/PID/stat``). The owner removes it on every exit path it
gets to run; a supervisor, a leak check or a Ray actor killed with SIGKILL cannot, so the first
temporary folder a process makes (and every run's start) sweeps the temporary folder and
``/dev/shm`` for names whose owner is gone: no process with that pid, or one with another start
time (the pid was reused). A folder whose owner is alive, or that belongs to another user, is
never touched (root included: another user's folder is theirs to keep).

The decision is :func:`stale_entries`, pure over what a folder lists; :func:`sweep` is the shell.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "FILE_KINDS",
    "Entry",
    "owner_tag",
    "start_ticks",
    "owner_alive",
    "owned_name_re",
    "stale_entries",
    "default_folders",
    "make_dir",
    "make_file",
    "sweep",
    "sweep_once",
]

logger = logging.getLogger(__name__)

SHM_FOLDER = "/dev/shm"
#: what each kind is: share() data, a session's private folder, a run's temporary checkpoints
#: (no store), a Ray actor's capture folder, the guarded pool's socket folder, a leak check's
#: spec, an import's captured output; a command trial's params file
KINDS = ("share", "run", "checkpoints", "ray", "bridge", "leakcheck", "import", "params")
#: the kinds that are files, not folders
FILE_KINDS = frozenset({"params"})
_NAME_RE = re.compile(
    r"^trainguard-(?P<kind>" + "|".join(KINDS) + r")-(?P<pid>\d+)-(?P<ticks>\d+)-[A-Za-z0-9_]+(?:\.json)?$"
)
_swept = [False]
_swept_lock = threading.Lock()


def owned_name_re() -> re.Pattern[str]:
    """The pattern of an owned name (groups ``kind``, ``pid``, ``ticks``)."""
    return _NAME_RE


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read()
        return int(text[text.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """``"<pid>-<start ticks>"`` of this process (or ``pid``): what an owned name carries."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_ticks(pid) or 0}"


def owner_alive(pid: int, ticks: int) -> bool:
    """Whether the process that made a name (its pid and start ticks) still runs."""
    now = start_ticks(pid)
    if now is None:
        if os.path.exists("/proc/self/stat"):
            return False
        try:  # no /proc: fall back to "a process with that pid exists"
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return now == ticks  # a reused pid has another start time


@dataclass(frozen=True, slots=True)
class Entry:
    """One name a folder lists, as the sweep sees it (``lstat``: a link is never followed)."""

    name: str
    uid: int
    is_dir: bool
    is_file: bool


def stale_entries(
    entries: Iterable[Entry],
    *,
    uid: int,
    alive: Callable[[int, int], bool],
    kinds: Iterable[str] | None = None,
) -> list[Entry]:
    """The entries to remove: an owned name (of ``kinds``, default all) of the right type (a
    folder, or a file for :data:`FILE_KINDS`), owned by ``uid``, whose owner is not ``alive``."""
    wanted = set(KINDS if kinds is None else kinds)
    out = []
    for entry in entries:
        match = _NAME_RE.match(entry.name)
        if match is None or match["kind"] not in wanted or entry.uid != uid:
            continue
        if not (entry.is_file if match["kind"] in FILE_KINDS else entry.is_dir):
            continue  # a link or something else under an owned name: not ours to judge
        if not alive(int(match["pid"]), int(match["ticks"])):
            out.append(entry)
    return out


def _entries(folder: str) -> list[Entry]:
    found = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if not name.startswith("trainguard-"):
            continue
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        found.append(Entry(name, st.st_uid, stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)))
    return found


def default_folders() -> list[str]:
    """Where owned names live: ``/dev/shm`` (share data) and the temporary folder."""
    folders = [SHM_FOLDER] if os.path.isdir(SHM_FOLDER) else []
    tmp = tempfile.gettempdir()
    return folders + ([tmp] if tmp not in folders else [])


def sweep(folders: Iterable[str] | None = None, kinds: Iterable[str] | None = None) -> list[str]:
    """Remove the owned folders and files whose owner is gone; return the paths removed."""
    removed = []
    uid = os.geteuid()
    for folder in default_folders() if folders is None else folders:
        for entry in stale_entries(_entries(folder), uid=uid, alive=owner_alive, kinds=kinds):
            path = os.path.join(folder, entry.name)
            if entry.is_dir:
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if not os.path.lexists(path):
                removed.append(path)
                logger.info("removed %s, left by process %s, which is gone", path, entry.name.split("-")[2])
    return removed


def sweep_once() -> None:
    """The sweep, once per process (the first temporary folder it makes)."""
    with _swept_lock:
        if _swept[0]:
            return
        _swept[0] = True
    try:
        sweep()
    except OSError:  # never fail the caller over someone else's leftovers
        logger.debug("the sweep of stale temporary folders failed", exc_info=True)


def make_dir(kind: str, folder: str | None = None) -> str:
    """A fresh private folder (0700) ``trainguard-<kind>-<pid>-<ticks>-<random>``."""
    sweep_once()
    return tempfile.mkdtemp(prefix=f"trainguard-{kind}-{owner_tag()}-", dir=folder)


def make_file(kind: str, suffix: str = "") -> tuple[int, str]:
    """A fresh private file (0600) ``trainguard-<kind>-<pid>-<ticks>-<random><suffix>``: ``(fd, path)``."""
    sweep_once()
    return tempfile.mkstemp(prefix=f"trainguard-{kind}-{owner_tag()}-", suffix=suffix)
