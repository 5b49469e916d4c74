"""How a session ends: every worker ended, the run's end recorded, its temporary files removed;
and the stop for a full disk (see :mod:`trainguard._diskfull`).

A full disk under the store or the checkpoints stops the run: busy workers are killed (each next
write would fail too), every half-written checkpoint of the run is removed, the reserve the run's
lock keeps beside the store is given back so that the end can be recorded (status ``disk_full``),
and the caller gets one :class:`~trainguard.exceptions.DiskFullError` line that says what filled
up and what to do. Store writes that still fail for lack of space while the session ends are
said once, in that line, never as tracebacks.

:func:`plan_ending` is the decision, pure (which workers are killed first, which attempts end
``disk_full``); :func:`shutdown` carries it out with the parts the loop hands it and the loop's
own state passed as values (its end's reason, its temporary folder, the shared data it owns).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import DiskFullError
from trainguard.outcomes import Failure

if TYPE_CHECKING:
    from trainguard.runner.session._loop import Session
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import Attempt, WorkerRecord
    from trainguard.runner.session._stages import Stages

__all__ = ["EndingPlan", "plan_ending", "shutdown", "trial_filled_the_disk", "stopped_for_disk", "DISK_FULL"]

logger = logging.getLogger(__name__)

#: the run's status, and its attempt's, when the disk filled up
DISK_FULL = "disk_full"


@dataclass(frozen=True, slots=True)
class EndingPlan:
    """How a session ends: ``status`` as recorded; ``kill_first`` the busy workers killed before
    anything else (a full disk: each next write would fail too); ``stopped`` the attempts they ran,
    recorded ``disk_full`` once the room is made; ``make_room`` whether the half-written checkpoints
    are removed and the store's reserve given back first."""

    status: str
    kill_first: tuple[WorkerRecord, ...] = ()
    stopped: tuple[tuple[WorkerRecord, Attempt], ...] = ()
    make_room: bool = False


def plan_ending(status: str, workers: Sequence[WorkerRecord]) -> EndingPlan:
    """What ending with ``status`` does before the pool's ordinary shutdown.

    Args:
        status: the run's end (``completed``, ``stopped``, ``interrupted``, ``failed``, ``disk_full``).
        workers: the pool's worker records.

    Returns:
        The plan: for a full disk the busy workers killed first and their attempts recorded
        ``disk_full``; for any other end nothing before the shutdown.
    """
    if status != DISK_FULL:
        return EndingPlan(status)
    busy = tuple(w for w in workers if w.state == "busy")
    stopped = tuple((w, w.trial) for w in busy if w.trial is not None)
    return EndingPlan(status, kill_first=busy, stopped=stopped, make_room=True)


def trial_filled_the_disk(
    stages: Stages,
    recorder: Recorder,
    worker: WorkerRecord,
    run: Attempt,
    error: Failure,
    peak: int | None,
    duration_s: float | None,
) -> None:
    """A trial failed because the disk of its checkpoints filled up: its half-written checkpoint
    goes first (the disk is full), the attempt is recorded ``disk_full`` (the trial stays pending:
    a resume runs it again from its last committed checkpoint), and the run stops.

    Raises:
        DiskFullError: always; :meth:`Session.run` turns it into the run's end.
    """
    from trainguard._diskfull import describe

    note = error.disk_full or {}
    stages.attempt_ended(run.index)
    folders = stages.folders
    what = describe(
        folders.base if folders is not None else note["path"],
        "the run's checkpoints",
        free=note.get("free_bytes"),
        event=f"filled up while trial {run.index} wrote its checkpoint",
    )
    recorder.finish_attempt(
        run,
        DISK_FULL,
        error=replace(error, status=DISK_FULL, message=f"{what}; its half-written checkpoint was removed"),
        peak=peak,
        duration_s=duration_s,
    )
    worker.trial = None  # recorded: the shutdown does not end it a second time
    raise DiskFullError(
        what, path=note["path"], free_bytes=note.get("free_bytes"), what=what, checkpoints=True
    )


def stopped_for_disk(recorder: Recorder, name: str, err: DiskFullError) -> DiskFullError:
    """The one line the caller gets: what filled up, what was kept, what to do (the store's own
    line when the run could not even begin).

    Args:
        recorder: the run's store writes (whether the run began, and its end was recorded).
        name: the run's name.
        err: the error the disk raised.

    Returns:
        The error the caller gets.
    """
    if recorder.persistent and recorder.run_id is None:
        return err
    what = getattr(err, "what", None) or str(err)
    kept = " (its committed checkpoints are kept)" if getattr(err, "checkpoints", False) else ""
    resume = (
        f"then run it again to resume from where it stopped{kept}"
        if recorder.persistent
        else "then run it again"
    )
    unrecorded = (
        " (the store could not record the stop)" if recorder.persistent and not recorder.end_recorded else ""
    )
    return DiskFullError(
        f"run {name} stopped{unrecorded}: {what}: free space there (or put the store on a "
        f"larger disk with --store), {resume}",
        path=getattr(err, "path", None),
        free_bytes=getattr(err, "free_bytes", None),
    )


def _before_shutdown(session: Session, plan: EndingPlan) -> None:
    """Room first: kill what still writes, remove every half-written checkpoint, free the reserve;
    then the attempts those workers were running end ``disk_full`` (they run again on resume)."""
    for worker in plan.kill_first:
        worker.handle.kill()
    if plan.make_room:
        session.stages.remove_partial()
        session.recorder.disk_full()
    for worker, run in plan.stopped:
        _record_stopped_attempt(session.recorder, worker, run)


def _record_stopped_attempt(recorder: Recorder, worker: WorkerRecord, run: Attempt) -> None:
    """A trial the full disk stopped (the store's write failed first, not its checkpoint)."""
    try:
        recorder.finish_attempt(
            run,
            DISK_FULL,
            error=Failure(
                DISK_FULL, f"stopped: the disk filled up while trial {run.index} ran; it runs again on resume"
            ),
            peak=worker.trial_peak_rss or None,
            duration_s=time.monotonic() - run.started_mono if run.started_mono else None,
        )
    except Exception:  # noqa: BLE001 - the end of the run must still be recorded
        logger.debug("could not record trial %d's stop for the full disk", run.index, exc_info=True)


def shutdown(
    session: Session, status: str, *, reason: str | None, tmpdir: str | None, owned_data: Any = None
) -> None:
    """End the session: workers, the run's end, the backend, the lock, the files.

    Args:
        session: the session, for its parts (pool, sampling, recorder, backend, stages).
        status: the run's end.
        reason: why it ended, in words (None: nothing to add).
        tmpdir: the session's temporary folder, removed (None: none made).
        owned_data: shared data the session made itself, closed (None: none).
    """
    plan = plan_ending(status, session.pool.workers)
    _before_shutdown(session, plan)
    session.pool.shutdown(status)
    session.sampling.stop()
    try:
        session.sampling.flush(force=True)
        session.recorder.finish_run(status, reason)
    except Exception:  # noqa: BLE001 - never mask the error that brought us here
        logger.exception("could not record the end of run %s", session.name)
    finally:
        try:
            session.backend.close()
        except Exception:  # noqa: BLE001 - the rest of the clean-up must still run
            logger.exception("could not close the %s backend", session.backend.name)
        session.recorder.release()
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
        session.stages.close()
        if owned_data is not None:
            owned_data.close()
