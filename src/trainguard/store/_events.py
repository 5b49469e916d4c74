"""The store's events: what happened to a run, a trial or a worker, in order.

One table's section of :class:`~trainguard.store.Store` (see ``_base.py``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.store._base import StoreRows
from trainguard.store._codec import _check_int, _dumps, _loads, _record_of_row
from trainguard.store._records import EventRecord

__all__ = ["EventRows", "EVENT_COLUMNS", "event_record"]

#: The columns of an :class:`EventRecord`, in its fields' order (a row is read positionally).
EVENT_COLUMNS = "event_id, run_id, time, kind, message, data_json, worker_id, idx"


def event_record(row: Sequence[Any]) -> EventRecord:
    """The event in ``row`` (the :data:`EVENT_COLUMNS`): the one reading that :meth:`Store.events`
    and the run view's newest events share."""
    return _record_of_row(EventRecord, row, data=_loads)


class EventRows(StoreRows):
    """The store's events."""

    def add_event(
        self,
        run_id: int,
        kind: str,
        message: str,
        *,
        data: dict[str, Any] | None = None,
        worker_id: int | None = None,
        index: int | None = None,
    ) -> None:
        """Append an event (``kind`` a short word such as ``"recycle"``, ``message`` one line for people)."""
        _check_int(run_id, "run_id")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"event kind must be a non-empty string, not {kind!r}")
        if not isinstance(message, str):
            raise ConfigError(f"event message must be a string, not {type(message).__name__}")
        if worker_id is not None:
            _check_int(worker_id, "worker_id")
        if index is not None:
            _check_int(index, "index")
        data_json = _dumps(data, "event data") if data is not None else None
        with self._write() as conn:
            self._event_json(conn, run_id, kind, message, data_json, worker_id, index, time.time())

    def _event(
        self,
        conn: sqlite3.Connection,
        run_id: int,
        kind: str,
        message: str,
        data: dict[str, Any] | None,
        worker_id: int | None,
        index: int | None,
        now: float,
    ) -> None:
        self._event_json(
            conn,
            run_id,
            kind,
            message,
            _dumps(data, "event data") if data is not None else None,
            worker_id,
            index,
            now,
        )

    @staticmethod
    def _event_json(
        conn: sqlite3.Connection,
        run_id: int,
        kind: str,
        message: str,
        data_json: str | None,
        worker_id: int | None,
        index: int | None,
        now: float,
    ) -> None:
        conn.execute(
            "INSERT INTO events (run_id, time, kind, message, data_json, worker_id, idx) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, now, kind, message, data_json, worker_id, index),
        )
        conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def events(
        self,
        run_id: int,
        *,
        limit: int | None = None,
        kinds: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
    ) -> list[EventRecord]:
        """The run's events, oldest first; with ``limit``, only the newest ``limit`` of them; with
        ``kinds``, only those kinds; with ``exclude``, none of those kinds."""
        query = f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id=?"
        args: list[Any] = [run_id]
        if kinds:
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        if exclude:
            query += f" AND kind NOT IN ({','.join('?' * len(exclude))})"
            args.extend(exclude)
        query += " ORDER BY event_id DESC"
        if limit is not None:
            query += " LIMIT ?"
            args.append(_check_int(limit, "limit", minimum=0))
        with self._read() as conn:
            rows = conn.execute(query, args).fetchall()
        return [event_record(r) for r in reversed(rows)]
