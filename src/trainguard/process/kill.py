"""Ending a process tree: SIGKILL to its cgroup, its process group and every descendant found.

:func:`kill_tree` also ends any earlier-seen pid that is still the same process (start time
checked, so a reused pid is never hit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import psutil

from trainguard.process.tree import HAVE_PROC, descendants, start_time

if TYPE_CHECKING:
    from trainguard.process.cgroup import TreeCgroup

__all__ = ["kill_tree", "kill_descendants", "kill_until_none", "signal_name", "is_running"]


def kill_tree(
    pid: int,
    *,
    cgroup: TreeCgroup | None = None,
    known: Iterable[int] = (),
    started_after: float | None = None,
    root_reaped: bool = False,
) -> list[int]:
    """SIGKILL ``pid``, its cgroup, its process group when it leads one, and every descendant.

    Args:
        pid: the root.
        cgroup: the tree's cgroup, when it has one (ends even members that left the tree).
        known: pids seen in the tree earlier (a dead root's orphans are no longer below it); each is
            killed only if it is still a process that started after ``started_after`` and is not
            this process or its child outside the tree (pid reuse).
        started_after: the root's start (unix seconds), for the ``known`` check.
        root_reaped: the root has been waited for, so its pid may already name another process:
            only its cgroup, its process group and the ``known`` pids are signalled.

    Returns:
        The pids signalled.
    """
    tree = [] if root_reaped else [pid, *descendants(pid)]
    me = os.getpid()
    extra: list[int] = []
    in_tree = set(tree)
    for other in known:
        if other in in_tree or other == me or other == pid:
            continue
        started = start_time(other)
        if started is None or (started_after is not None and started < started_after - 1.0):
            continue
        try:
            if psutil.Process(other).ppid() == me:
                continue
        except psutil.Error:
            continue
        extra.append(other)
    killed: list[int] = []
    if cgroup is not None:
        killed.extend(cgroup.kill())
    try:
        # a worker leads its own process group: this also reaches children that left the tree
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for target in [*tree, *extra]:
        try:
            os.kill(target, signal.SIGKILL)
            killed.append(target)
        except OSError:
            continue
    return killed


def signal_name(number: int) -> str:
    """``9 -> "SIGKILL"``; an unknown number gives ``"signal 99"``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def kill_descendants(pid: int | None = None, *, passes: int = 10) -> list[int]:
    """SIGKILL every descendant of ``pid`` (default: this process), leaving ``pid`` itself.

    Repeated until none is left: in a subreaper the orphans of a killed child are re-parented to
    it and found on the next pass, and a child forked during a pass is found on the next.
    """
    root = os.getpid() if pid is None else pid
    return kill_until_none(
        lambda: [p for p in descendants(root) if is_running(p)], passes=passes, pause_s=0.005
    )


def kill_until_none(find: Callable[[], list[int]], *, passes: int, pause_s: float) -> list[int]:
    """SIGKILL what ``find()`` lists, again after ``pause_s``, until it lists nothing or ``passes``
    ran out (what was killed may leave orphans, or a fork in flight, for the next pass)."""
    killed: list[int] = []
    for _ in range(passes):
        alive = find()
        if not alive:
            break
        for target in alive:
            with contextlib.suppress(OSError):
                os.kill(target, signal.SIGKILL)
                killed.append(target)
        time.sleep(pause_s)
    return killed


def is_running(pid: int) -> bool:
    """False for a zombie (exited, not yet reaped) or a gone process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] not in (b"Z", b"X")
    except (OSError, ValueError):
        return psutil.pid_exists(pid) if not HAVE_PROC else False
