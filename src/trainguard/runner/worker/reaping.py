"""The end of a trial's processes: what a trial started does not live into the next trial.

After every trial (before its result is sent) the worker SIGKILLs each descendant that was not
there when the worker became ready (what its bootstrap and preloads started is kept). A child that
double-forks or calls ``setsid`` is still found: the worker is the child subreaper of its tree, so
such orphans are re-parented to it, and where the worker has a cgroup of its own its members are
ended too. The portable tier (no ``/proc``, no subreaper) finds what psutil lists as children.
"""

from __future__ import annotations

import os

__all__ = ["TrialReaper"]


class TrialReaper:
    """Ends the processes a trial left behind. ``cgroup_path``: the worker's own cgroup, if any."""

    def __init__(self, *, portable: bool, cgroup_path: str | None = None) -> None:
        self.portable = portable
        self.cgroup_path = cgroup_path
        self.kept: frozenset[int] = frozenset()

    def _found(self) -> list[int]:
        me = os.getpid()
        if self.portable:
            import psutil

            try:
                pids = {c.pid for c in psutil.Process(me).children(recursive=True)}
            except psutil.Error:
                return []
        else:
            from trainguard.process.kill import is_running
            from trainguard.process.tree import descendants

            pids = set(descendants(me))
            if self.cgroup_path is not None:
                from trainguard.process.cgroup import TreeCgroup

                pids.update(TreeCgroup(self.cgroup_path).pids())
            pids = {p for p in pids if is_running(p)}
        return sorted(pids - self.kept - {me})

    def keep_present(self) -> None:
        """What runs now (the bootstrap's own helpers) is never reaped."""
        self.kept = frozenset(self._found())

    def reap(self) -> list[int]:
        """SIGKILL what the trial left, until none is left; the pids signalled."""
        from trainguard.process.kill import kill_until_none

        return kill_until_none(self._found, passes=10, pause_s=0.005)
