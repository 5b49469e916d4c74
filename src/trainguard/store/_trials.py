"""The store's trials (one result each, written once) and their attempts.

A mixin of :class:`~trainguard.store.Store` (one table, one section): the connection, the
schema and the locking are the store's own (``_store.py``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from trainguard.exceptions import ConfigError, StoreError
from trainguard.outcomes import Failure
from trainguard.store._base import StoreRows
from trainguard.store._codec import (
    _check_attempt_key,
    _check_int,
    _check_optional_number,
    _dump_failure,
    _dumps,
    _load_failure,
    _record_of_row,
)
from trainguard.store._records import (
    AttemptRecord,
    TrialRecord,
)
from trainguard.store._schema import (
    ATTEMPT_STATUSES,
    TRIAL_STATUSES,
)
from trainguard.store._trial_rows import TRIAL_COLUMNS, trial_record

#: the columns of an :class:`AttemptRecord`, in its fields' order (a row is read positionally)
_SELECT_ATTEMPTS = (
    "SELECT run_id, idx, attempt, worker_id, status, error_json, peak_rss_bytes, duration_s,"
    " started_at, finished_at FROM attempts"
)


class TrialRows(StoreRows):
    """The store's trials (one result each, written once) and their attempts."""

    def unfinished_trials(self, run_id: int) -> list[tuple[int, Any]]:
        """``(index, params)`` of the trials not yet finished, in index order."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT idx, params_json FROM trials WHERE run_id=? AND status='pending' ORDER BY idx",
                (run_id,),
            ).fetchall()
        return [(int(i), json.loads(p)) for i, p in rows]

    def start_attempt(self, run_id: int, index: int, attempt: int, worker_id: int) -> None:
        """Record that ``attempt`` (1, 2, ...) of trial ``index`` started in worker ``worker_id``."""
        _check_attempt_key(run_id, index, attempt)
        _check_int(worker_id, "worker_id")
        with self._write_to_trial(run_id, index) as (conn, now):
            conn.execute(
                # the session: the run's sessions so far (one supervisor at a time holds the run)
                "INSERT INTO attempts (run_id, idx, attempt, worker_id, started_at, session)"
                " VALUES (?, ?, ?, ?, ?, (SELECT sessions FROM runs WHERE run_id=?))",
                (run_id, index, attempt, worker_id, now, run_id),
            )
            conn.execute(
                "UPDATE trials SET attempts=max(attempts, ?) WHERE run_id=? AND idx=? AND status='pending'",
                (attempt, run_id, index),
            )

    def finish_attempt(
        self,
        run_id: int,
        index: int,
        attempt: int,
        *,
        status: str,
        error: Failure | None,
        peak_rss_bytes: int | None,
        duration_s: float | None,
        worker_id: int | None = None,
    ) -> bool:
        """Record how an attempt ended. Returns False (writing nothing) when it was already recorded.

        An attempt never started with :meth:`start_attempt` is recorded anyway when ``worker_id``
        says which worker ran it.

        Raises:
            ConfigError: ``status`` is not one of :data:`ATTEMPT_STATUSES`, ``error`` is not a ``Failure`` (or not JSON), or
                the attempt was never started and no ``worker_id`` is given.
        """
        _check_attempt_key(run_id, index, attempt)
        if status not in ATTEMPT_STATUSES:
            raise ConfigError(
                f"attempt status {status!r} is not one of {', '.join(sorted(ATTEMPT_STATUSES))}"
            )
        if peak_rss_bytes is not None:
            _check_int(peak_rss_bytes, "peak_rss_bytes", minimum=0)
        _check_optional_number(duration_s, "duration_s")
        if worker_id is not None:
            _check_int(worker_id, "worker_id")
        error_json = _dump_failure(error)
        now = time.time()
        with self._write() as conn:
            self._require_trial(conn, run_id, index)
            cur = conn.execute(
                "UPDATE attempts SET status=?, error_json=?, peak_rss_bytes=?, duration_s=?, finished_at=?"
                " WHERE attempt_pk=(SELECT max(attempt_pk) FROM attempts WHERE run_id=? AND idx=? AND attempt=?"
                " AND finished_at IS NULL)",
                (status, error_json, peak_rss_bytes, duration_s, now, run_id, index, attempt),
            )
            if cur.rowcount == 0:
                seen = conn.execute(
                    "SELECT 1 FROM attempts WHERE run_id=? AND idx=? AND attempt=?", (run_id, index, attempt)
                ).fetchone()
                if seen:
                    return False
                if worker_id is None:
                    raise ConfigError(
                        f"attempt {attempt} of trial {index} in run {run_id} was never started: call "
                        "start_attempt() first, or pass worker_id= to record an attempt that was not"
                    )
                conn.execute(
                    "INSERT INTO attempts (run_id, idx, attempt, worker_id, status, error_json, peak_rss_bytes,"
                    " duration_s, started_at, finished_at, session)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT sessions FROM runs WHERE run_id=?))",
                    (
                        run_id,
                        index,
                        attempt,
                        worker_id,
                        status,
                        error_json,
                        peak_rss_bytes,
                        duration_s,
                        now - (duration_s or 0.0),
                        now,
                        run_id,
                    ),
                )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))
        return True

    def finish_trial(
        self,
        run_id: int,
        index: int,
        *,
        status: str,
        value: Any,
        error: Failure | None,
        attempts: int,
        peak_rss_bytes: int | None,
        worker_id: int | None,
        duration_s: float | None,
    ) -> bool:
        """Record a trial's final result, exactly once.

        One conditional UPDATE in one transaction: a supervisor killed at any instant leaves the trial
        either pending (it is rerun on resume) or finished with all its fields, never half-written.

        Returns:
            True if this call finished the trial; False (writing nothing) if it was already finished.

        Raises:
            ConfigError: ``status`` is not "ok"/"failed", ``value`` is not JSON-serializable, or ``error`` is not a ``Failure``.
            StoreError: there is no such trial.
        """
        _check_int(run_id, "run_id")
        _check_int(index, "index", minimum=0)
        if status not in TRIAL_STATUSES:
            raise ConfigError(f"trial status must be 'ok' or 'failed', not {status!r}")
        _check_int(attempts, "attempts", minimum=0)
        if peak_rss_bytes is not None:
            _check_int(peak_rss_bytes, "peak_rss_bytes", minimum=0)
        if worker_id is not None:
            _check_int(worker_id, "worker_id")
        _check_optional_number(duration_s, "duration_s")
        value_json = _dumps(value, f"the result of trial {index}")
        error_json = _dump_failure(error)
        now = time.time()
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE trials SET status=?, value_json=?, error_json=?, attempts=?, peak_rss_bytes=?,"
                " worker_id=?, duration_s=?, finished_at=? WHERE run_id=? AND idx=? AND status='pending'",
                (
                    status,
                    value_json,
                    error_json,
                    attempts,
                    peak_rss_bytes,
                    worker_id,
                    duration_s,
                    now,
                    run_id,
                    index,
                ),
            )
            if cur.rowcount == 0:
                self._require_trial(conn, run_id, index)
                return False
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))
        return True

    def trials(self, run_id: int) -> list[TrialRecord]:
        """Every trial of the run, in index order."""
        rows = self._rows_of_run(f"SELECT {TRIAL_COLUMNS} FROM trials", run_id, order_by="idx")
        seeds = self.trial_seeds(run_id)
        return [trial_record(r, seeds) for r in rows]

    def attempts(self, run_id: int, index: int | None = None) -> list[AttemptRecord]:
        """The run's attempts (of one trial when ``index`` is given), in the order they started."""
        rows = self._rows_of_run(_SELECT_ATTEMPTS, run_id, ("idx", index), order_by="attempt_pk")
        return [_record_of_row(AttemptRecord, r, error=_load_failure) for r in rows]

    def _require_trial(self, conn: sqlite3.Connection, run_id: int, index: int) -> None:
        if conn.execute("SELECT 1 FROM trials WHERE run_id=? AND idx=?", (run_id, index)).fetchone() is None:
            raise StoreError(f"no trial {index} in run id {run_id} of store {self._shown}", path=self._shown)
