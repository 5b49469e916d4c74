"""The supervisor's side of a run, cut by the state each part owns.

- :mod:`._loop`: the queue, dispatch and results; the only part that waits.
- :mod:`._pool`: the worker records, spares, reservations and budget kills.
- :mod:`._recovery`: retries, OOM shrink and remembered (fitted) sizes: it returns the next attempt.
- :mod:`._stages`: staged trials' checkpoint folders and resume.
- :mod:`._recorder`: every store write and event of the run.
"""

from __future__ import annotations

from trainguard.runner.session._loop import (
    RunProgress,
    Session,
    SessionConfig,
    TrialResult,
    WorkerProgress,
    default_run_name,
)
from trainguard.runner.session._recovery import device_key

__all__ = [
    "Session",
    "SessionConfig",
    "TrialResult",
    "RunProgress",
    "WorkerProgress",
    "default_run_name",
    "device_key",
]
