"""A cgroup v2 made for one process tree, and the subreaper fallback: keeping a tree together.

Where a cgroup v2 can be made (:meth:`TreeCgroup.create`), its ``cgroup.procs`` lists every member
even after the root died, and ``cgroup.kill`` ends them all at once. Where not, a root that called
:func:`become_subreaper` keeps every descendant that detaches under it.
"""

from __future__ import annotations

import logging
import os
import time

from trainguard.process.kill import kill_until_none

__all__ = ["TreeCgroup", "become_subreaper", "tracking_mechanisms"]

logger = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
#: cgroup folders already swept of stale trainguard cgroups by this process
_SWEPT: set[str] = set()


class TreeCgroup:
    """A cgroup v2 made for one process tree: membership survives re-parenting, and one write ends it.

    Only ``cgroup.procs`` and ``cgroup.kill`` are used (no controller needs enabling), so this works
    wherever the process may create a child of its own cgroup: as root, or in a delegated subtree
    (a systemd user session). :meth:`create` returns None where it may not.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def _own_cgroup_dir() -> str | None:
        """This process's cgroup v2 directory, when the v2 hierarchy is mounted."""
        try:
            with open("/proc/self/cgroup") as fh:
                lines = fh.read().splitlines()
            with open("/proc/self/mountinfo") as fh:
                mounts = fh.read().splitlines()
        except OSError:
            return None
        own = next((line[3:] for line in lines if line.startswith("0::")), None)
        if own is None:
            return None
        for row in mounts:
            head, _, tail = row.partition(" - ")
            if tail.split(" ", 1)[0] != "cgroup2":
                continue
            fields = head.split()
            root, mount_point = fields[3], fields[4]
            rel = own[len(root) :] if root != "/" and own.startswith(root) else own
            return os.path.join(mount_point, rel.lstrip("/"))
        return None

    @classmethod
    def create(cls, name: str) -> TreeCgroup | None:
        """Make a child cgroup ``name`` of this process's cgroup; None where that is not allowed."""
        base = cls._own_cgroup_dir()
        if base is None or not os.path.isfile(os.path.join(base, "cgroup.procs")):
            return None
        if base not in _SWEPT:
            _SWEPT.add(base)
            cls.remove_stale(base)
        path = os.path.join(base, name)
        try:
            os.mkdir(path, 0o755)
        except OSError as err:
            logger.debug("no cgroup for process trees (%s): %s", path, err)
            return None
        group = cls(path)
        # membership must be writable by us (a child of a cgroup we cannot move into is no use)
        if not os.access(os.path.join(path, "cgroup.procs"), os.W_OK):
            group.remove()
            return None
        return group

    @staticmethod
    def remove_stale(base: str, prefix: str = "trainguard-") -> list[str]:
        """Remove the empty cgroups ``PREFIX<pid>-...`` under ``base`` whose creator ``pid`` is gone
        (a supervisor killed with SIGKILL cannot remove its workers' cgroups; the next one does)."""
        removed: list[str] = []
        try:
            names = [n for n in os.listdir(base) if n.startswith(prefix)]
        except OSError:
            return removed
        for name in names:
            owner = name[len(prefix) :].split("-", 1)[0]
            if not owner.isdigit() or os.path.exists(f"/proc/{owner}"):
                continue
            try:
                os.rmdir(os.path.join(base, name))  # refused (EBUSY) while it has members
                removed.append(name)
            except OSError:
                continue
        return removed

    def join(self, pid: int = 0) -> bool:
        """Move ``pid`` (0: the calling process) into this cgroup; its future children follow."""
        try:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
                fh.write(str(pid or os.getpid()))
            return True
        except OSError as err:
            logger.debug("joining cgroup %s failed: %s", self.path, err)
            return False

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs"), "rb") as fh:
                return [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> list[int]:
        """SIGKILL every member (``cgroup.kill`` where the kernel has it, else one by one, repeated
        until the group is empty or stops changing)."""
        members = self.pids()
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w") as fh:
                fh.write("1")
            return members
        except OSError:
            pass
        return kill_until_none(self.pids, passes=20, pause_s=0.01)

    def remove(self, timeout_s: float = 2.0) -> bool:
        """Kill what is left and remove the cgroup (it can be removed once its members are reaped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    logger.debug("cgroup %s not removed: members remain", self.path)
                    return False
                self.kill()
                time.sleep(0.02)


def become_subreaper() -> bool:
    """Make the calling process a child subreaper (Linux >= 3.4): every descendant that detaches
    (double fork, ``setsid``) is re-parented to it instead of to init, so it stays in the tree."""
    if not os.path.exists("/proc/self/status"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tracking_mechanisms() -> tuple[str, ...]:
    """What this machine allows for keeping a tree together: ``"cgroup"`` and/or ``"subreaper"``."""
    out: list[str] = []
    probe = TreeCgroup.create(f"trainguard-{os.getpid()}-probe")
    if probe is not None:
        probe.remove()
        out.append("cgroup")
    if os.path.exists("/proc/self/status") and os.uname().sysname == "Linux":
        out.append("subreaper")
    return tuple(out)
