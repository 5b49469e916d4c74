"""What ``trainguard show`` prints of a run, read in bounded memory: a page of trials, counts and
flags asked of SQLite, and the long tables streamed through a cursor and folded as they go.

A run of a million trials has a million rows in ``trials``, ``attempts``, ``trial_seeds`` and
``bytes_in_use`` and often in ``events``: none of these tables is ever read whole into this process
here. Each method says what it folds and how far its memory grows.
"""

from __future__ import annotations

import sqlite3
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from trainguard.store._base import StoreRows
from trainguard.store._codec import _loads
from trainguard.store._events import EVENT_COLUMNS, event_record
from trainguard.store._records import EventRecord, TrialRecord
from trainguard.store._trial_rows import TRIAL_COLUMNS, trial_record

__all__ = ["RunViewRows", "pooled_max"]


def _missing_table(err: sqlite3.OperationalError) -> bool:
    """A store written before the table existed (a reader never creates it)."""
    return "no such table" in str(err)


def pooled_max(values: Iterator[float], count: int, width: int) -> list[float]:
    """The ``count`` values max-pooled into ``width`` columns, as :func:`trainguard.cli._display.sparkline`
    pools them (column ``i`` holds values ``int(i * step)`` to ``int((i + 1) * step)``), from an
    iterator: memory is ``width`` numbers, not ``count``."""
    if count <= width:
        return list(values)
    step = count / width
    ends = [max(int((i + 1) * step), int(i * step) + 1) for i in range(width)]
    out: list[float] = []
    column, best = 0, None
    for k, value in enumerate(values):
        while column < width and k >= ends[column]:
            out.append(best)  # type: ignore[arg-type]  # every column holds one value at least
            column, best = column + 1, None
        best = value if best is None or value > best else best
    if best is not None and column < width:
        out.append(best)
    return out


class RunViewRows(StoreRows):
    """The reads behind ``trainguard show``'s tables, each bounded whatever the run's size."""

    def trial_page(self, run_id: int, limit: int) -> list[TrialRecord]:
        """The run's first ``limit`` trials in index order, with their seeds."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {TRIAL_COLUMNS} FROM trials WHERE run_id=? ORDER BY idx LIMIT ?", (run_id, limit)
            ).fetchall()
            seeds: dict[int, int] = {}
            if rows:
                try:
                    seeds = dict(
                        conn.execute(
                            "SELECT idx, seed FROM trial_seeds WHERE run_id=? AND idx BETWEEN ? AND ?",
                            (run_id, rows[0][1], rows[-1][1]),
                        ).fetchall()
                    )
                except sqlite3.OperationalError as err:
                    if not _missing_table(err):
                        raise
        return [trial_record(r, seeds) for r in rows]

    def trial_count(self, run_id: int) -> int:
        """How many trials the run has."""
        with self._read() as conn:
            return int(conn.execute("SELECT count(*) FROM trials WHERE run_id=?", (run_id,)).fetchone()[0])

    def has_trial(self, run_id: int, index: int) -> bool:
        with self._read() as conn:
            found = conn.execute("SELECT 1 FROM trials WHERE run_id=? AND idx=?", (run_id, index)).fetchone()
        return found is not None

    def _exists(self, sql: str, args: tuple[Any, ...]) -> bool:
        with self._read() as conn:
            try:
                return bool(conn.execute(f"SELECT EXISTS ({sql})", args).fetchone()[0] == 1)
            except sqlite3.OperationalError as err:
                if _missing_table(err):
                    return False
                raise

    def has_seeds(self, run_id: int) -> bool:
        return self._exists("SELECT 1 FROM trial_seeds WHERE run_id=?", (run_id,))

    def has_predictions(self, run_id: int) -> bool:
        return self._exists("SELECT 1 FROM trial_predictions WHERE run_id=?", (run_id,))

    def has_bytes_in_use(self, run_id: int) -> bool:
        return self._exists("SELECT 1 FROM bytes_in_use WHERE run_id=?", (run_id,))

    def has_trial_memory(self, run_id: int) -> bool:
        """Whether a Node worker stored its readings (``tfjs``/``node``) with a trial's stats."""
        return self._exists(
            "SELECT 1 FROM events WHERE run_id=? AND kind='trial_stats' AND idx IS NOT NULL"
            " AND (json_type(data_json, '$.tfjs') IS NOT NULL OR json_type(data_json, '$.node') IS NOT NULL)",
            (run_id,),
        )

    def trial_memory(self, run_id: int, first: int, last: int) -> dict[int, dict[str, Any]]:
        """The last Node readings stored for each trial from ``first`` to ``last``:
        ``{index: {"tfjs": {...}, "node": {...}}}``."""
        out: dict[int, dict[str, Any]] = {}
        with self._read() as conn:
            for index, data_json in conn.execute(
                "SELECT idx, data_json FROM events WHERE run_id=? AND kind='trial_stats' AND idx BETWEEN ? AND ?"
                " ORDER BY event_id",
                (run_id, first, last),
            ):
                data = _loads(data_json)
                if isinstance(data, dict) and ("tfjs" in data or "node" in data):
                    out[int(index)] = {k: data[k] for k in ("tfjs", "node") if k in data}
        return out

    def bytes_in_use_after(self, run_id: int, first: int, last: int) -> dict[int, int]:
        """``{trial index: bytes in use after its last recorded attempt}`` for ``first`` .. ``last``."""
        with self._read() as conn:
            try:
                rows = conn.execute(
                    "SELECT idx, bytes_in_use FROM bytes_in_use WHERE run_id=? AND idx BETWEEN ? AND ?"
                    " ORDER BY idx, attempt",
                    (run_id, first, last),
                ).fetchall()
            except sqlite3.OperationalError as err:
                if _missing_table(err):
                    return {}
                raise
        return {int(index): int(value) for index, value in rows}

    def bytes_in_use_series(self, run_id: int) -> Iterator[tuple[int, str, array[int]]]:
        """Per worker, in worker order: ``(worker_id, allocator of its last reading, its readings in
        the order they were taken)``; memory is one worker's readings (8 bytes each) at a time."""
        with self._read() as conn:
            try:
                cursor = conn.execute(
                    "SELECT worker_id, allocator, bytes_in_use FROM bytes_in_use WHERE run_id=?"
                    " ORDER BY worker_id, time, idx, attempt",
                    (run_id,),
                )
            except sqlite3.OperationalError as err:
                if _missing_table(err):
                    return
                raise
            current: int | None = None
            allocator = ""
            values: array[int] = array("q")
            for worker_id, alloc, value in cursor:
                if worker_id != current:
                    if current is not None:
                        yield current, allocator, values
                    current, values = worker_id, array("q")
                allocator = alloc
                values.append(int(value))
            if current is not None:
                yield current, allocator, values

    def sample_overview(self, run_id: int, width: int) -> tuple[int, float | None, float | None, list[float]]:
        """The run's samples with an RSS above 0 as ``(count, lowest, highest, RSS max-pooled into
        at most width columns)``, in (time, worker) order, folded from a cursor."""
        where = "FROM samples WHERE run_id=? AND rss_bytes > 0"
        with self._read() as conn:
            count, low, high = conn.execute(
                f"SELECT count(*), min(rss_bytes), max(rss_bytes) {where}", (run_id,)
            ).fetchone()
            cursor = conn.execute(f"SELECT rss_bytes {where} ORDER BY time, worker_id", (run_id,))
            pooled = pooled_max((row[0] for row in cursor), int(count), width)
        return int(count), low, high, pooled

    def fragmentation_tail(self, run_id: int, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` fragmentation figures of the run's ``trial_stats`` events (as
        ``show``'s memory rows), read newest first until there are enough."""
        newest: list[list[dict[str, Any]]] = []
        held = 0
        with self._read() as conn:
            cursor = conn.execute(
                "SELECT idx, worker_id, data_json FROM events WHERE run_id=? AND kind='trial_stats'"
                " ORDER BY event_id DESC",
                (run_id,),
            )
            for index, worker_id, data_json in cursor:
                data = _loads(data_json) or {}
                rows = [
                    {"index": index, "worker_id": worker_id, **row} for row in data.get("fragmentation") or []
                ]
                if rows:
                    newest.append(rows)
                    held += len(rows)
                if held >= limit:
                    break
        ordered = [row for rows in reversed(newest) for row in rows]
        return ordered[-limit:] if limit else []

    def events_newest(self, run_id: int, kinds: Sequence[str], limit: int) -> list[EventRecord]:
        """The newest ``limit`` events of these kinds, oldest first."""
        marks = ",".join("?" * len(kinds))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id=? AND kind IN ({marks})"
                " ORDER BY event_id DESC LIMIT ?",
                (run_id, *kinds, limit),
            ).fetchall()
        return [event_record(r) for r in reversed(rows)]

    def trials_per_session(self, run_id: int, starts: Sequence[float]) -> list[int]:
        """How many of the run's trials finished in each session (from its start to the next's),
        given the sessions' start times in order."""
        counts = []
        with self._read() as conn:
            for i, start in enumerate(starts):
                end = starts[i + 1] if i + 1 < len(starts) else None
                query = "SELECT count(*) FROM trials WHERE run_id=? AND finished_at >= ?"
                args: tuple[Any, ...] = (run_id, start)
                if end is not None:
                    query += " AND finished_at < ?"
                    args += (end,)
                counts.append(int(conn.execute(query, args).fetchone()[0]))
        return counts
