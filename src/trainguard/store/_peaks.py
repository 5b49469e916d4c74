"""The store's peak-model table: the prediction each attempt started with, and the observations
an earlier run of the same function's code leaves for the next one.

A mixin of :class:`~trainguard.store.Store` (one table, one section): it uses the store's own
connection helpers, so every write is the supervisor's, in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from trainguard.store._base import StoreRows

__all__ = ["PeakRows", "PEAK_TABLE_DDL"]

PEAK_TABLE_DDL = """
-- The peak model's prediction for each attempt as it started (Policy(predict_peaks=True)), with
-- the params it ran with (a shrunk size differs from the trial's own params).
CREATE TABLE IF NOT EXISTS trial_predictions (
    run_id      INTEGER NOT NULL REFERENCES runs(run_id),
    idx         INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    params_json TEXT NOT NULL,
    peak_bytes  INTEGER,
    low_bytes   INTEGER,
    high_bytes  INTEGER,
    reason      TEXT NOT NULL,
    acted       TEXT,
    created_at  REAL NOT NULL,
    PRIMARY KEY (run_id, idx, attempt)
);
"""


class PeakRows(StoreRows):
    """Rows of ``trial_predictions``."""

    def record_prediction(
        self,
        run_id: int,
        index: int,
        attempt: int,
        params: Any,
        prediction: dict[str, Any],
        acted: str | None = None,
    ) -> None:
        """The prediction ``attempt`` of trial ``index`` starts (or is skipped) with; ``acted`` says
        what the session did with it (``"skipped"``, ``"shrunk"``, None)."""
        row = (
            run_id,
            index,
            attempt,
            json.dumps(params, sort_keys=True, default=str),
            prediction.get("peak_bytes"),
            prediction.get("low_bytes"),
            prediction.get("high_bytes"),
            str(prediction.get("reason") or ""),
            acted,
            time.time(),
        )
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO trial_predictions (run_id, idx, attempt, params_json, peak_bytes,"
                " low_bytes, high_bytes, reason, acted, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )

    def predictions(
        self, run_id: int, *, first: int | None = None, last: int | None = None
    ) -> dict[int, dict[str, Any]]:
        """``{index: prediction}`` of each trial's latest attempt (empty for a store without them);
        with ``first`` and ``last``, of the trials with those indexes and the ones between only."""
        where = "run_id=?"
        args: tuple[Any, ...] = (run_id,)
        if first is not None and last is not None:
            where, args = "run_id=? AND idx BETWEEN ? AND ?", (run_id, first, last)
        rows = self._rows(
            "SELECT idx, attempt, params_json, peak_bytes, low_bytes, high_bytes, reason, acted"
            f" FROM trial_predictions WHERE {where} ORDER BY idx, attempt",
            args,
        )
        out: dict[int, dict[str, Any]] = {}
        for idx, attempt, params, peak, low, high, reason, acted in rows:
            out[int(idx)] = {
                "attempt": int(attempt),
                "params": json.loads(params),
                "peak_bytes": peak,
                "low_bytes": low,
                "high_bytes": high,
                "reason": reason,
                "acted": acted,
            }
        return out

    def peak_observations(
        self, fn_ref: str, fn_version: str | None, limit: int = 2000
    ) -> list[tuple[Any, int]]:
        """``(params it ran with, peak)`` of the ``ok`` trials of every run of ``fn_ref`` whose
        function version is ``fn_version`` (the same code), newest first, at most ``limit``."""
        rows = self._rows(
            "SELECT t.params_json, p.params_json, t.peak_bytes, r.config_json FROM"
            " (SELECT run_id, idx, params_json, peak_rss_bytes AS peak_bytes, attempts, finished_at FROM trials"
            "  WHERE status='ok' AND peak_rss_bytes > 0) t"
            " JOIN runs r ON r.run_id=t.run_id"
            " LEFT JOIN trial_predictions p ON p.run_id=t.run_id AND p.idx=t.idx AND p.attempt=t.attempts"
            " WHERE r.fn_ref=? ORDER BY t.finished_at DESC LIMIT ?",
            (fn_ref, int(limit)),
        )
        out: list[tuple[Any, int]] = []
        for trial_params, ran_with, peak, config in rows:
            version = _stored_version(config)
            if fn_version is not None and version not in (None, fn_version):
                continue  # another version of the code: its peaks say nothing of this one's
            out.append((json.loads(ran_with or trial_params), int(peak)))
        return out

    def run_peak_observations(
        self, run_id: int, *, fn_version: str | None = None, limit: int = 2000
    ) -> list[tuple[float, Any, int]]:
        """``(finished_at, params it ran with, peak)`` of the ``ok`` trials of one run (every session
        of it), newest first, at most ``limit``: what a run's peak model is fitted on (see
        :mod:`trainguard.runner.policy._prediction_scope`).

        Args:
            run_id: the run.
            fn_version: the function's code version; a run stored with another version gives
                nothing (its peaks say nothing of this code's). None: any version.
            limit: the most rows returned.

        Returns:
            The rows, newest first.
        """
        rows = self._rows(
            "SELECT t.finished_at, t.params_json, p.params_json, t.peak_bytes, r.config_json FROM"
            " (SELECT run_id, idx, params_json, peak_rss_bytes AS peak_bytes, attempts, finished_at FROM trials"
            "  WHERE status='ok' AND peak_rss_bytes > 0 AND run_id=?) t"
            " JOIN runs r ON r.run_id=t.run_id"
            " LEFT JOIN trial_predictions p ON p.run_id=t.run_id AND p.idx=t.idx AND p.attempt=t.attempts"
            " ORDER BY t.finished_at DESC LIMIT ?",
            (int(run_id), int(limit)),
        )
        out: list[tuple[float, Any, int]] = []
        for finished, trial_params, ran_with, peak, config in rows:
            if fn_version is not None and _stored_version(config) not in (None, fn_version):
                return []  # the run's code is another version: none of its peaks apply
            out.append((float(finished or 0.0), json.loads(ran_with or trial_params), int(peak)))
        return out

    def run_names(self) -> list[str]:
        """The name of every run in the store, oldest first.

        Returns:
            The names.
        """
        with self._read() as conn:
            return [str(row[0]) for row in conn.execute("SELECT name FROM runs ORDER BY run_id")]

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._read() as conn:
            try:
                return list(conn.execute(sql, args).fetchall())
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):  # a store written before the table existed (reader)
                    return self._rows_without_predictions(conn, sql, args)
                raise

    @staticmethod
    def _rows_without_predictions(
        conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]
    ) -> list[tuple[Any, ...]]:
        if "LEFT JOIN trial_predictions" not in sql:
            return []
        plain = sql.replace(
            " LEFT JOIN trial_predictions p ON p.run_id=t.run_id AND p.idx=t.idx AND p.attempt=t.attempts", ""
        ).replace("p.params_json", "NULL")
        return list(conn.execute(plain, args).fetchall())


def _stored_version(config: str | None) -> str | None:
    """The function version a run's stored settings name (None: not recorded, or unreadable)."""
    try:
        version = json.loads(config or "{}").get("fn_version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None
