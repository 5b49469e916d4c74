"""What every table's section of the store may use of the store itself: its connection
context managers, its path as the user wrote it, the few methods one section calls on another, and
the query of one run's rows that several sections read (optionally one trial's or one worker's).

The sections are mixins of :class:`~trainguard.store.Store`, one table each; the connection, the
schema and the locking are the store's own (``_store.py``). This base is last in its method order,
so the store's and each section's own definitions win over these declarations.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

__all__ = ["StoreRows"]


class StoreRows:
    """The store as one table's section sees it; the store sets these and defines the methods."""

    _path: Path
    _shown: str
    _max_samples: int
    _resolution_s: float

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:  # pragma: no cover - Store's
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:  # pragma: no cover - Store's
        raise NotImplementedError

    def _event(self, conn: sqlite3.Connection, *args: Any, **kwargs: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def trial_seeds(self, run_id: int) -> dict[int, int]:  # pragma: no cover - RunRows'
        raise NotImplementedError

    def _require_trial(self, conn: sqlite3.Connection, run_id: int, index: int) -> None:  # pragma: no cover
        raise NotImplementedError

    @contextmanager
    def _write_to_trial(self, run_id: int, index: int) -> Iterator[tuple[sqlite3.Connection, float]]:
        """One write transaction on a row of trial ``index`` of run ``run_id``, which must exist:
        yields the connection and the time written, and marks the run updated then when the body
        ends without an exception (a body that raises writes nothing).

        Raises:
            StoreError: there is no such trial.
        """
        now = time.time()
        with self._write() as conn:
            self._require_trial(conn, run_id, index)
            yield conn, now
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def _rows_of_run(
        self,
        select: str,
        run_id: int,
        narrow_to: tuple[str, Any | None] = ("", None),
        *,
        order_by: str,
        added_later: bool = False,
    ) -> list[tuple[Any, ...]]:
        """One run's rows of ``select`` (written up to its table's name), ordered by ``order_by``:
        only those whose column ``narrow_to[0]`` is ``narrow_to[1]`` when that value is not None
        (one trial's, one worker's; every row of the run by default). A table ``added_later`` than the store's first release gives
        no rows from a store written before it."""
        column, value = narrow_to
        where = "run_id=?" if value is None else f"run_id=? AND {column}=?"
        args: tuple[Any, ...] = (run_id,) if value is None else (run_id, value)
        query = f"{select} WHERE {where} ORDER BY {order_by}"
        if added_later:
            return self._rows_if_table(query, args)
        with self._read() as conn:
            return list(conn.execute(query, args).fetchall())

    def _rows_if_table(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows ``sql`` reads from a table added after the store's first release: none from a
        store written before the table existed (a reader never creates it)."""
        with self._read() as conn:
            try:
                return list(conn.execute(sql, args).fetchall())
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):
                    return []
                raise
