"""A worker a retention would recycle gets a ``malloc_trim(0)`` first.

When ``recycle_above`` or ``recycle_growth`` would recycle a worker whose RSS grew while its
allocator's bytes in use stayed flat (:func:`~trainguard.runner.policy.decide_recycle` sets
``trim_first``), the pool asks the idle worker to call glibc's ``malloc_trim(0)`` (the worker's
``trim`` op) and the worker takes no trial until it answers. Its answer lands here: the policy
decides again with the tree's RSS read now as the latest reading. A trim that gave the memory back
keeps the worker; one that did not (or no ``malloc_trim`` in the worker: not glibc) recycles it,
for retention. The worker's series keeps the reading from before the trim, so that the next trials'
growth (the allocator keeps memory again) reads as it is.

:func:`decide_after_trim` is the decision, pure; :func:`on_trimmed` records the trim and hands the
loop the recycle to carry out (or None: the worker is kept).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainguard.runner.policy import RecycleDecision, decide_recycle
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy, WorkerHistory
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import WorkerRecord

__all__ = ["decide_after_trim", "on_trimmed"]

logger = logging.getLogger(__name__)


def decide_after_trim(
    policy: Policy, history: WorkerHistory, *, before: int, after: int, trimmed: bool, said: str
) -> RecycleDecision | None:
    """Keep or recycle a worker after its ``malloc_trim(0)``: the recycle policy decides again
    with the RSS read after the trim as the latest reading.

    Args:
        policy: the recycle rules.
        history: the worker's series (its latest reading the one before the trim).
        before: the worker tree's RSS before the trim.
        after: its RSS after.
        trimmed: whether the worker had a ``malloc_trim`` to call (glibc).
        said: the trim in words, for the decision's message.

    Returns:
        The recycle (its message and values saying what the trim gave back), or None to keep it.
    """
    history = replace(history, rss_after_bytes=(*history.rss_after_bytes[:-1], after), trimmed=True)
    decision = decide_recycle(policy, history)
    if decision is None:
        return None
    gave = format_bytes(max(0, before - after))
    return replace(
        decision,
        values={**decision.values, "trim_rss_before_bytes": before, "trim_rss_after_bytes": after},
        message=f"{decision.message}; malloc_trim(0) gave back only {gave}"
        if trimmed
        else f"{decision.message}; {said}",
    )


def on_trimmed(
    *,
    pool: Pool,
    recorder: Recorder,
    policy: Policy,
    worker: WorkerRecord,
    msg: dict[str, Any],
    more_to_run: bool,
) -> RecycleDecision | None:
    """The worker's answer to ``trim``: record what the trim gave back; the recycle the loop then
    carries out, if any.

    Args:
        pool: the pool (the worker's tree read, its state set idle).
        recorder: the store writes.
        policy: the recycle rules.
        worker: the worker that answered.
        msg: its answer (``trimmed``, ``rss_before_bytes``, ``rss_bytes``).
        more_to_run: whether trials wait and the run goes on (else the worker is kept as it is).

    Returns:
        The recycle to carry out, or None to keep the worker.
    """
    if worker.state != "trimming" or not worker.rss_after:
        return None
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
    recorder.event("trim", f"worker {worker.worker_id}: {said}", data=values, worker=worker)
    if not more_to_run:
        return None
    decision = decide_after_trim(
        policy, pool.history(worker), before=before, after=after, trimmed=bool(msg["trimmed"]), said=said
    )
    if decision is None:
        logger.info("worker %d kept: %s", worker.worker_id, said)
    return decision
