"""The supervisor's side of a run, cut by the state each part owns.

- :mod:`._loop`: the queue, dispatch and results; the only part that waits.
- :mod:`._pool`: the worker records, spares, reservations and budget kills.
- :mod:`._recovery`: retries, OOM shrink and remembered (fitted) sizes: it returns the next attempt.
- :mod:`._stages`: staged trials' checkpoint folders, resumes and exits at a checkpoint.
- :mod:`._sampling`: the watchdog tick (read every tree, check the limits and the budget, kill)
  and the samples it keeps until the loop stores them.
- :mod:`._recorder`: every store write and event of the run.
- :mod:`._records` (an attempt, a worker record) and :mod:`._results` (what a run hands back).
"""

from __future__ import annotations

from trainguard.runner.session._loop import Session
from trainguard.runner.session._predict import PeakForecaster
from trainguard.runner.session._recovery import device_key
from trainguard.runner.session._results import RunProgress, TrialResult, WorkerProgress, default_run_name

__all__ = [
    "Session",
    "PeakForecaster",
    "TrialResult",
    "RunProgress",
    "WorkerProgress",
    "default_run_name",
    "device_key",
]
