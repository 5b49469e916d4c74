"""The store's SQLite schema, its version, and the vocabularies the supervisor writes into it."""

from __future__ import annotations

from typing import Any

from trainguard.outcomes import ATTEMPT_STATUSES as _ATTEMPT_STATUSES
from trainguard.outcomes import RECYCLE_CAUSES
from trainguard.outcomes import WORKER_REASONS as _WORKER_REASONS

#: Bump on any incompatible change to the tables below; a store with another version is refused
#: with :class:`~trainguard.exceptions.SchemaVersionError` (no silent migration).
SCHEMA_VERSION = 1

#: Why a worker ended (``Store.end_worker(reason=...)``) with the words ``trainguard show`` prints,
#: and the attempt statuses ``Store.finish_attempt(status=...)`` accepts ("running" and
#: "interrupted" are written by the store itself): :mod:`trainguard.outcomes`'s vocabularies.
WORKER_REASONS = _WORKER_REASONS
ATTEMPT_STATUSES = _ATTEMPT_STATUSES

#: ``Store.add_stage(event=...)``: a checkpoint committed, a resume from one, a start over.
STAGE_EVENTS = ("checkpoint", "resume", "restart")

#: ``Store.finish_trial(status=...)``
TRIAL_STATUSES = frozenset({"ok", "failed"})

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    fn_ref      TEXT NOT NULL,
    params_json TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status      TEXT NOT NULL,
    trial_count INTEGER NOT NULL,
    sessions    INTEGER NOT NULL DEFAULT 1,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS trials (
    run_id         INTEGER NOT NULL REFERENCES runs(run_id),
    idx            INTEGER NOT NULL,
    params_json    TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending',
    value_json     TEXT,
    error_json     TEXT,
    attempts       INTEGER NOT NULL DEFAULT 0,
    peak_rss_bytes INTEGER,
    worker_id      INTEGER,
    duration_s     REAL,
    finished_at    REAL,
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE IF NOT EXISTS attempts (
    attempt_pk     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         INTEGER NOT NULL REFERENCES runs(run_id),
    idx            INTEGER NOT NULL,
    attempt        INTEGER NOT NULL,
    worker_id      INTEGER NOT NULL,
    status         TEXT NOT NULL DEFAULT 'running',
    error_json     TEXT,
    peak_rss_bytes INTEGER,
    duration_s     REAL,
    started_at     REAL NOT NULL,
    finished_at    REAL,
    session        INTEGER
);
CREATE INDEX IF NOT EXISTS attempts_by_trial ON attempts (run_id, idx, attempt);
CREATE TABLE IF NOT EXISTS workers (
    worker_pk   INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      INTEGER NOT NULL REFERENCES runs(run_id),
    worker_id   INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    started_at  REAL NOT NULL,
    ended_at    REAL,
    reason      TEXT,
    detail_json TEXT
);
CREATE INDEX IF NOT EXISTS workers_by_run ON workers (run_id, worker_id);
CREATE TABLE IF NOT EXISTS events (
    event_id  INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id    INTEGER NOT NULL REFERENCES runs(run_id),
    time      REAL NOT NULL,
    kind      TEXT NOT NULL,
    message   TEXT NOT NULL,
    data_json TEXT,
    worker_id INTEGER,
    idx       INTEGER
);
CREATE INDEX IF NOT EXISTS events_by_run ON events (run_id, event_id);
-- One row per time bucket of width base_interval_s * 2**level: the highest reading in it.
CREATE TABLE IF NOT EXISTS samples (
    run_id    INTEGER NOT NULL REFERENCES runs(run_id),
    worker_id INTEGER NOT NULL,
    bucket    INTEGER NOT NULL,
    time      REAL NOT NULL,
    rss_bytes INTEGER NOT NULL,
    uss_bytes INTEGER,
    gpu_bytes INTEGER,
    PRIMARY KEY (run_id, worker_id, bucket)
) WITHOUT ROWID;
-- The batch size (or other integer) that fitted a trial function on a device and limits:
-- written by out-of-memory recovery (source 'shrink') and find_batch_size (source 'fit').
CREATE TABLE IF NOT EXISTS fitted_sizes (
    fn_ref         TEXT NOT NULL,
    params_key     TEXT NOT NULL,
    device         TEXT NOT NULL,
    key            TEXT NOT NULL,
    size           INTEGER NOT NULL,
    peak_rss_bytes INTEGER,
    source         TEXT NOT NULL,
    detail_json    TEXT,
    updated_at     REAL NOT NULL,
    PRIMARY KEY (fn_ref, params_key, device, key)
);
-- The seed each trial ran with (Runner(seed=...)): derived from the run's seed and the index.
CREATE TABLE IF NOT EXISTS trial_seeds (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    idx    INTEGER NOT NULL,
    seed   INTEGER NOT NULL,
    PRIMARY KEY (run_id, idx)
);
-- A staged trial's history: one row per checkpoint it committed (event 'checkpoint'), per resume
-- from one ('resume') and per start over ('restart', note says why). The checkpoint files go when
-- the trial finishes; these rows stay.
CREATE TABLE IF NOT EXISTS stages (
    stage_pk       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         INTEGER NOT NULL REFERENCES runs(run_id),
    idx            INTEGER NOT NULL,
    attempt        INTEGER NOT NULL,
    stage          INTEGER NOT NULL,
    worker_id      INTEGER,
    time           REAL NOT NULL,
    rss_bytes      INTEGER,
    peak_rss_bytes INTEGER,
    event          TEXT NOT NULL,
    note           TEXT
);
CREATE INDEX IF NOT EXISTS stages_by_trial ON stages (run_id, idx, stage_pk);
-- Each run's UUID: its checkpoints are kept under ``run-<uuid>`` and their manifests name it, so a
-- new store whose run ids restart at 1 never resumes another store's checkpoints.
CREATE TABLE IF NOT EXISTS run_uuids (
    run_id INTEGER PRIMARY KEY REFERENCES runs(run_id),
    uuid   TEXT NOT NULL UNIQUE
);
-- The settings of each session of a run (a resume with other flags adds a row, never rewrites one).
CREATE TABLE IF NOT EXISTS session_settings (
    run_id      INTEGER NOT NULL REFERENCES runs(run_id),
    session     INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    started_at  REAL NOT NULL,
    PRIMARY KEY (run_id, session)
);
CREATE TABLE IF NOT EXISTS sample_series (
    run_id    INTEGER NOT NULL REFERENCES runs(run_id),
    worker_id INTEGER NOT NULL,
    level     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, worker_id)
);
"""

#: Tables added after schema 1 without a version bump: a writer creates them in an older store of
#: the same version, a reader treats them as empty when absent.
ADDITIVE_TABLES = (
    "fitted_sizes",
    "trial_seeds",
    "stages",
    "trial_predictions",
    "run_uuids",
    "session_settings",
    "bytes_in_use",
)


#: Columns added after schema 1 without a version bump, with the statement that fills them in a
#: store written before: a writer adds and fills them, a reader of an older store goes without.
#: ``attempts.session``: the session of the run that ran the attempt (its settings are that
#: session's ``session_settings`` row); an older store's attempts get the last session started
#: before them, its only session where the run had one.
ADDITIVE_COLUMNS = (
    (
        "attempts",
        "session",
        "INTEGER",
        "UPDATE attempts SET session = coalesce("
        "(SELECT max(s.session) FROM session_settings s WHERE s.run_id = attempts.run_id"
        " AND s.started_at <= attempts.started_at),"
        " (SELECT r.sessions FROM runs r WHERE r.run_id = attempts.run_id AND r.sessions = 1))"
        " WHERE session IS NULL",
    ),
)


def describe_worker_end(reason: str | None, detail: dict[str, Any] | None = None) -> str:
    """Say in words why a worker ended, with the numbers ``detail`` carries when it has them.

    Args:
        reason: a key of :data:`WORKER_REASONS`, or None for a worker still running.
        detail: what the supervisor recorded (``rss_bytes``, ``limit_bytes``, ``signal``, ``exitcode``,
            ``trials``, ``message``...). Unknown keys are ignored.

    Returns:
        One short phrase, such as ``"killed at the memory limit (1.2 GiB > 1.0 GiB)"``.
    """
    from trainguard.units import format_bytes, format_bytes_apart

    if reason is None:
        return "running (or its supervisor stopped)"
    text = WORKER_REASONS.get(reason, reason.replace("_", " "))
    detail = detail or {}
    if reason == "recycled" and detail.get("cause") in RECYCLE_CAUSES:
        text += " " + RECYCLE_CAUSES[detail["cause"]]
    extras: list[str] = []
    if isinstance(detail.get("why"), str):
        extras.append(detail["why"])
    if isinstance(detail.get("rss_bytes"), int) and isinstance(detail.get("limit_bytes"), int):
        extras.append("{} > {}".format(*format_bytes_apart(detail["rss_bytes"], detail["limit_bytes"])))
    elif isinstance(detail.get("rss_bytes"), int):
        extras.append(f"at {format_bytes(detail['rss_bytes'])}")
    if detail.get("signal") is not None:
        extras.append(f"signal {detail['signal']}")
    if detail.get("exitcode") not in (None, 0):
        extras.append(f"exit code {detail['exitcode']}")
    if isinstance(detail.get("trials"), int):
        extras.append(f"after {detail['trials']} trial{'s' if detail['trials'] != 1 else ''}")
    if isinstance(detail.get("message"), str) and detail["message"]:
        extras.append(detail["message"])
    return f"{text} ({'; '.join(extras)})" if extras else text
