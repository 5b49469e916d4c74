"""The results store: runs, trials, attempts, workers, events and memory samples in one SQLite file.

Only the supervisor writes (one writer); ``trainguard runs``/``show`` and reports read it with
``Store(path, readonly=True)`` while a run goes on. Params and results are JSON, never pickle.

Resume: :meth:`Store.begin_run` with the name and params of a stored run returns that run, and
:meth:`Store.unfinished_trials` lists what is left; :meth:`Store.finish_trial` writes each result
exactly once even if the supervisor is killed at any instant.
"""

from __future__ import annotations

from trainguard.store import _records
from trainguard.store._codec import _dumps as encode_json
from trainguard.store._liveness import interrupted_note
from trainguard.store._records import *  # noqa: F403 - the records are the face's, as _records lists them
from trainguard.store._runs import settings_change_words
from trainguard.store._schema import (
    ATTEMPT_STATUSES,
    SCHEMA_VERSION,
    TRIAL_STATUSES,
    WORKER_REASONS,
    describe_worker_end,
)
from trainguard.store._store import DEFAULT_STORE, Store

__all__ = [
    "interrupted_note",
    "settings_change_words",
    "Store",
    "DEFAULT_STORE",
    "SCHEMA_VERSION",
    "WORKER_REASONS",
    "ATTEMPT_STATUSES",
    "TRIAL_STATUSES",
    "describe_worker_end",
    "encode_json",
    *_records.__all__,
]
