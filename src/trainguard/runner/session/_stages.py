"""Supervisor side of staged trials and shared data: where checkpoints live, what a dispatch tells
the worker about them, and what is recorded. Kept apart from the supervisor's loop, which calls it
at a few points (dispatch, a ``stage`` message, a trial's end, shutdown)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trainguard.runner.worker.context import latest_stage, verify_stage

__all__ = ["CheckpointFolders", "prepare_resume"]

logger = logging.getLogger(__name__)


class CheckpointFolders:
    """The checkpoint folders of one run: ``<store>.checkpoints/run-<id>/trial-<index>/`` next to
    the store, or a temporary folder (removed at the end) for a run without a store."""

    def __init__(self, store_path: Path | None, run_id: int | None) -> None:
        if store_path is not None and run_id is not None:
            self.base = str(store_path.with_name(store_path.name + ".checkpoints"))
            self.root = os.path.join(self.base, f"run-{run_id}")
            self._temporary = False
        else:
            self.base = self.root = tempfile.mkdtemp(prefix="trainguard-checkpoints-")
            self._temporary = True

    def trial_dir(self, index: int) -> str:
        return os.path.join(self.root, f"trial-{index}")

    def remove_trial(self, index: int) -> None:
        shutil.rmtree(self.trial_dir(index), ignore_errors=True)

    def close(self) -> None:
        """Remove what is left when nothing can resume from it: a temporary root always, the run's
        folder (and the store's checkpoints folder) when they are empty."""
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        for folder in (self.root, self.base):
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty (an unfinished trial's checkpoint) or absent


def prepare_resume(
    folders: CheckpointFolders, index: int, recorded_stage: int | None
) -> tuple[int | None, str | None]:
    """Before a trial is dispatched: ``(stage it resumes from or None, why it starts over or None)``.

    ``recorded_stage`` is the last checkpoint the store says this trial committed (since its last
    start over). A committed stage folder whose files are missing or changed is removed, and the
    trial starts over with the reason said; so does a recorded stage whose folder is gone.
    """
    root = folders.trial_dir(index)
    found = latest_stage(root)
    if found is not None:
        problem = verify_stage(found[1])
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


def data_message(data: Any) -> dict[str, Any] | None:
    """What a trial message says about the run's shared data (a path and names, never the arrays)."""
    if data is None:
        return None
    return {"path": data.path, "names": list(data.names), "single": bool(data.single)}
