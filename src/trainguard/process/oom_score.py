"""Which process the kernel's OOM killer takes first: a worker, not its supervisor.

The supervisor holds what a run must not lose (the store's open transaction, the run's lock, its
``share()`` segments, the record of why each worker ended); a worker is what the runner itself
would end at a memory limit. Each worker (and so each process its trial starts, which inherits the
value) gets the supervisor's ``oom_score_adj`` raised by :data:`WORKER_OOM_SCORE_RAISE`. Raising
the value needs no privilege; the supervisor keeps its own.
"""

from __future__ import annotations

import logging

__all__ = ["WORKER_OOM_SCORE_RAISE", "raise_oom_score", "oom_score_adj"]

logger = logging.getLogger(__name__)

#: how far above its supervisor's a worker's ``oom_score_adj`` is set (the kernel's range is
#: -1000..1000; 500 puts a worker's tree ahead of a supervisor of any size on the same host)
WORKER_OOM_SCORE_RAISE = 500


def oom_score_adj(pid: int | str = "self") -> int | None:
    """A process's ``oom_score_adj``, or None where the kernel has none (not Linux)."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def raise_oom_score(pid: int, *, by: int = WORKER_OOM_SCORE_RAISE) -> int | None:
    """Set ``pid``'s ``oom_score_adj`` to this process's plus ``by`` (at most 1000); returns the
    value set, or None where it cannot be (not Linux, the process already gone)."""
    own = oom_score_adj()
    if own is None:
        return None
    value = min(1000, own + by)
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w", encoding="ascii") as fh:
            fh.write(str(value))
    except OSError as err:
        logger.debug("cannot raise the OOM score of pid %s: %s", pid, err)
        return None
    return value
