"""A worker a retention would recycle gets a ``malloc_trim(0)`` first.

When ``recycle_above`` or ``recycle_growth`` would recycle a worker whose RSS grew while its
allocator's bytes in use stayed flat (:func:`~trainguard.runner.policy.decide_recycle` sets
``trim_first``), the pool asks the idle worker to call glibc's ``malloc_trim(0)`` (the worker's
``trim`` op) and the worker takes no trial until it answers. Its answer lands here: the policy
decides again with the tree's RSS read now as the latest reading. A trim that gave the memory back
keeps the worker; one that did not (or no ``malloc_trim`` in the worker: not glibc) recycles it,
for retention. The worker's series keeps the reading from before the trim, so that the next trials'
growth (the allocator keeps memory again) reads as it is.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainguard.runner.policy import decide_recycle
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner.session._loop import Session
    from trainguard.runner.session._records import WorkerRecord

__all__ = ["on_trimmed"]

logger = logging.getLogger(__name__)


def on_trimmed(session: Session, worker: WorkerRecord, msg: dict[str, Any]) -> None:
    """The worker's answer to ``trim``: record what the trim gave back, then keep or recycle it."""
    pool = session.pool
    if worker.state != "trimming" or not worker.rss_after:
        return
    reading = pool.read_tree(worker)
    before = worker.rss_after[-1]
    after = reading[0] if reading else max(0, before - (msg["rss_before_bytes"] - msg["rss_bytes"]))
    with pool.lock:
        worker.cur_rss = after
        worker.state = "idle"
    n = worker.trials_done
    values = {"trimmed": msg["trimmed"], "rss_before_bytes": before, "rss_after_bytes": after, "trials": n}
    if msg["trimmed"]:
        said = f"malloc_trim(0) after trial {n}: RSS {format_bytes(before)} -> {format_bytes(after)}"
    else:
        said = f"no malloc_trim(0) in it after trial {n} (its allocator is not glibc's)"
    session.recorder.event("trim", f"worker {worker.worker_id}: {said}", data=values, worker=worker)
    if not session._queue or session._stop_result is not None:
        return
    history = pool.history(worker)
    history = replace(history, rss_after_bytes=(*history.rss_after_bytes[:-1], after), trimmed=True)
    decision = decide_recycle(session.policy, history)
    if decision is None:
        logger.info("worker %d kept: %s", worker.worker_id, said)
        return
    gave = format_bytes(max(0, before - after))
    decision = replace(
        decision,
        values={**decision.values, "trim_rss_before_bytes": before, "trim_rss_after_bytes": after},
        message=f"{decision.message}; malloc_trim(0) gave back only {gave}"
        if msg["trimmed"]
        else f"{decision.message}; {said}",
    )
    pool.retire(worker, decision)
