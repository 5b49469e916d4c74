"""Supervisor side of staged trials and shared data: where checkpoints live, what a dispatch tells
the worker about them, whether a worker goes on after a checkpoint, and what is recorded.

:class:`Stages` owns the run's checkpoint folders and the per-worker stage series; the loop calls
it at a few points (dispatch, a ``stage`` message, a ``staged`` result, a trial's end, shutdown)."""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import CheckpointError
from trainguard.runner._checkpoint_safety import open_private_dirs, remove_private
from trainguard.runner.policy import RecycleDecision, decide_stage, worker_history
from trainguard.runner.session._records import Attempt
from trainguard.runner.worker.context import latest_stage, verify_stage

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import WorkerRecord
    from trainguard.runner.session.soft_limit_and_flight import LastSeconds

__all__ = ["CheckpointFolders", "prepare_resume", "data_message", "whole_trial", "Stages"]


logger = logging.getLogger(__name__)


class CheckpointFolders:
    """The checkpoint folders of one run: ``<store>.checkpoints/run-<uuid>/trial-<index>/`` next to
    the store, or a temporary folder (removed at the end) for a run without a store. Every level is
    private to this user (see :mod:`trainguard.runner._checkpoint_safety`); ``levels`` is how many
    components of a trial folder the runner owns."""

    def __init__(self, store_path: Path | None, run_uuid: str | None) -> None:
        self.run_uuid = run_uuid or uuid.uuid4().hex
        if store_path is not None and run_uuid is not None:
            self.base = str(store_path.with_name(store_path.name + ".checkpoints"))
            self.root = os.path.join(self.base, f"run-{run_uuid}")
            self._temporary = False
            self.levels = 3
            if os.path.lexists(self.base):  # planted before this run: refused before any work
                with open_private_dirs(self.base, 1, create=False):
                    pass
        else:
            from trainguard._tempdirs import make_dir

            self.base = self.root = make_dir("checkpoints")
            self._temporary = True
            self.levels = 2

    def trial_dir(self, index: int) -> str:
        return os.path.join(self.root, f"trial-{index}")

    def message(self, index: int) -> dict[str, Any]:
        """What a trial message says about its checkpoint folder."""
        return {
            "checkpoint_dir": self.trial_dir(index),
            "checkpoint_levels": self.levels,
            "run_uuid": self.run_uuid,
        }

    def remove_trial(self, index: int) -> None:
        path = self.trial_dir(index)
        if os.path.lexists(path):  # most trials never made one: one stat, not the private walk
            remove_private(path, self.levels)

    def remove_next(self, index: int) -> None:
        """Remove a trial's ``next/`` (the checkpoint being written; never resumed from)."""
        remove_private(os.path.join(self.trial_dir(index), "next"), self.levels + 1)

    def remove_partial(self) -> None:
        """Remove every trial's ``next/`` under the run's folder (a full disk: room first)."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            if name.startswith("trial-") and name[6:].isdigit():
                self.remove_next(int(name[6:]))

    def close(self) -> None:
        """Remove what is left when nothing can resume from it: a temporary root always, the run's
        folder (and the store's checkpoints folder) when they are empty."""
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        for folder in (self.root, self.base):
            try:
                os.rmdir(folder)  # never follows a link: a link is "not a directory"
            except OSError:
                break  # not empty (an unfinished trial's checkpoint) or absent


def prepare_resume(
    folders: CheckpointFolders, index: int, recorded_stage: int | None
) -> tuple[int | None, str | None]:
    """Before a trial is dispatched: ``(stage it resumes from or None, why it starts over or None)``.

    ``recorded_stage`` is the last checkpoint the store says this trial committed (since its last
    start over). A committed stage folder whose files are missing or changed (size or content
    hash), or that another run wrote, is removed, and the trial starts over with the reason said;
    so does a recorded stage whose folder is gone. A folder that is not private to this user is
    never read.
    """
    root = folders.trial_dir(index)
    if not recorded_stage and not os.path.lexists(root):
        return None, None  # nothing to resume from or to lose (most trials: one stat, not 3 opens)
    try:
        with open_private_dirs(root, folders.levels, create=False) as fd:
            found = latest_stage(root) if fd is not None else None
    except CheckpointError as err:
        return None, str(err)
    if found is not None:
        problem = verify_stage(found[1], folders.run_uuid)
        if problem is None:
            return found[0], None
        shutil.rmtree(found[1], ignore_errors=True)
        return None, f"the checkpoint of stage {found[0]} is unusable: {problem}"
    if recorded_stage:
        return (
            None,
            f"the checkpoint of stage {recorded_stage} is gone: {root}/stage-{recorded_stage} was deleted",
        )
    return None, None


def whole_trial(
    peak: int | None, duration_s: float | None, attempts: list[Any]
) -> tuple[int | None, float | None]:
    """A staged trial's peak and duration over all its stages: the last stage's ``peak`` and
    ``duration_s`` with those of the earlier attempts that left at a checkpoint (``staged``)."""
    staged = [a for a in attempts if a.status == "staged"]
    peaks = [p for p in [peak, *(a.peak_rss_bytes for a in staged)] if p is not None]
    durations = [d for d in [duration_s, *(a.duration_s for a in staged)] if d is not None]
    return (max(peaks) if peaks else None), (sum(durations) if durations else None)


def data_message(data: Any) -> dict[str, Any] | None:
    """What a trial message says about the run's shared data (a path and names, never the arrays)."""
    if data is None:
        return None
    return {"path": data.path, "names": list(data.names), "single": bool(data.single)}


@dataclass(eq=False, repr=False, kw_only=True)
class Stages:
    """Staged trials in one session: their checkpoint folders, resumes and exits at a checkpoint."""

    policy: Policy
    recorder: Recorder
    pool: Pool
    #: whether trials of this function can stage (not a command, not a Node function)
    staged_kind: bool
    #: memory pressure: a checkpoint under pressure ends the worker (the trial goes on elsewhere)
    last: LastSeconds
    folders: CheckpointFolders | None = field(default=None, init=False)

    def whole_trial(
        self, run: Attempt, peak: int | None, duration_s: float | None
    ) -> tuple[int | None, float | None]:
        """A finishing trial's peak and duration: over all its stages' workers when it was staged
        (read only for a trial past its first attempt, so an unstaged trial costs nothing)."""
        if run.attempt <= 1 or not self.staged_kind or self.recorder.run_id is None:
            return peak, duration_s
        return whole_trial(peak, duration_s, self.recorder.attempts(run.index))

    def open(self) -> None:
        self.folders = CheckpointFolders(self.recorder.store_path(), self.recorder.run_uuid())

    def message(self, worker: WorkerRecord, run: Attempt, data: Any) -> dict[str, Any]:
        """The shared data and checkpoint folder a trial message carries; a staged trial's resume
        (or its start over when its checkpoint was deleted) is recorded here."""
        out: dict[str, Any] = {"data": data_message(data)}
        if not self.staged_kind or self.folders is None:
            return out
        out.update(self.folders.message(run.index))
        recorded = None
        for stage in self.recorder.stages(run.index):
            recorded = (
                stage.stage if stage.event == "checkpoint" else None if stage.event == "restart" else recorded
            )
        resume, reason = prepare_resume(self.folders, run.index, recorded)
        if self.recorder.run_id is None:
            return out
        if resume is not None:
            self.recorder.add_stage(
                run.index, run.attempt, resume, event="resume", worker_id=worker.worker_id
            )
        elif reason is not None:
            out["restart_reason"] = reason
            self.recorder.add_stage(
                run.index, run.attempt, 0, event="restart", worker_id=worker.worker_id, note=reason
            )
            self.recorder.event(
                "stage_restart",
                f"trial {run.index} starts over on worker {worker.worker_id}: {reason}",
                data={"reason": reason},
                worker=worker,
                index=run.index,
            )
        return out

    def on_checkpoint(self, worker: WorkerRecord, msg: dict[str, Any]) -> bool:
        """A staged trial committed a checkpoint: record it, and say whether the worker goes on."""
        run = worker.trial
        if run is None or run.index != msg["index"]:
            return True
        reading = self.pool.read_tree(worker, rediscover=True)
        rss = reading[0] if reading else int(msg["rss_bytes"])
        with self.pool.lock:
            peak = max(worker.stage_peak_rss, rss)
            worker.stage_peak_rss = rss
            worker.stages_done += 1
            worker.stage_rss_after.append(rss)
            worker.stage_peaks.append(peak)
        self.recorder.add_stage(
            run.index,
            run.attempt,
            int(msg["stage"]),
            event="checkpoint",
            worker_id=worker.worker_id,
            rss_bytes=rss,
            peak_rss_bytes=peak,
        )
        history = worker_history(
            worker.stages_done, worker.stage_rss_after, worker.stage_peaks, self.pool.supervisor_rss()
        )
        decision = decide_stage(self.policy, history)
        if msg.get("remaining") == 0:
            decision = None  # the trial ends after this stage: leaving now would only cost a start
        pressured = self.last.stage_exit(
            worker.worker_id, remaining=msg.get("remaining"), now_s=time.monotonic()
        )
        if pressured is not None:
            decision = pressured
            self.last.record_end(
                self.recorder, worker, "checkpointed", rss_bytes=rss, stage=int(msg["stage"])
            )
        ending = getattr(worker.handle, "ending", None)  # a cluster job about to end (Slurm's pilot)
        if decision is None and ending and msg.get("remaining") != 0:
            decision = RecycleDecision("job_ending", {}, f"its cluster job is about to end ({ending})")
        if decision is None:
            return True
        worker.stage_exit = decision
        self.recorder.event(
            "stage_exit",
            f"trial {run.index} leaves worker {worker.worker_id} at its checkpoint of stage {msg['stage']} "
            f"and resumes in a fresh worker: {decision.message}",
            data={"rule": decision.rule, "stage": msg["stage"], **decision.values},
            worker=worker,
            index=run.index,
        )
        return False

    def left_at_checkpoint(
        self, worker: WorkerRecord, run: Attempt, duration_s: float
    ) -> tuple[Attempt, RecycleDecision]:
        """The worker left at a checkpoint: the attempt is recorded ``staged``; the trial goes on
        from there in a fresh worker (the attempt returned) and this worker is recycled (the rule);
        the files it made in /dev/shm stay for its next stage."""
        worker.handle.trial_ended(remove=False)
        with self.pool.lock:
            worker.trial = None
            worker.state = "idle"
            peak = max(worker.trial_peak_rss, worker.stage_peak_rss)
        self.recorder.finish_attempt(
            run,
            "staged",
            error=None,
            peak=peak or None,
            duration_s=duration_s,
        )
        resumed = Attempt(
            run.index,
            run.params,
            run.attempt + 1,
            run.session_attempts,  # leaving at a checkpoint is no failure: no retry used
            attempt_params=run.attempt_params,
            mixed_precision=run.mixed_precision,
            oom_attempts=run.oom_attempts,
            sized=True,
        )
        return resumed, worker.stage_exit or RecycleDecision("stage_exit", {}, "left at a checkpoint")

    def attempt_ended(self, index: int) -> None:
        """An attempt ended without a result: what it was writing is removed (its committed
        stages stay for the next attempt)."""
        if self.folders is not None and self.staged_kind:
            self.folders.remove_next(index)

    def remove_partial(self) -> None:
        if self.folders is not None and self.staged_kind:
            self.folders.remove_partial()

    def trial_done(self, index: int) -> None:
        if self.folders is not None:
            self.folders.remove_trial(index)

    def close(self) -> None:
        if self.folders is not None:
            self.folders.close()
