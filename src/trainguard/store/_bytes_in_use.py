"""The store's table of allocator readings: each worker's C allocator bytes in use right after
each attempt ended, where the allocator has such a count (glibc, jemalloc, tcmalloc).

A mixin of :class:`~trainguard.store.Store` (one table, one section), added after schema 1
without a version bump: a writer creates the table in an older store, a reader of a store
written before it reads no readings.
"""

from __future__ import annotations

import time

from trainguard.store._base import StoreRows
from trainguard.store._records import BytesInUseReading

__all__ = ["BytesInUseRows", "BYTES_IN_USE_TABLE_DDL"]

BYTES_IN_USE_TABLE_DDL = """
-- The worker's C allocator bytes in use right after each attempt (after its cleanup and a
-- gc.collect()), where its allocator counts them (glibc mallinfo2, jemalloc, tcmalloc).
CREATE TABLE IF NOT EXISTS bytes_in_use (
    run_id       INTEGER NOT NULL REFERENCES runs(run_id),
    idx          INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    worker_id    INTEGER NOT NULL,
    allocator    TEXT NOT NULL,
    bytes_in_use INTEGER NOT NULL,
    time         REAL NOT NULL,
    PRIMARY KEY (run_id, idx, attempt)
);
"""


#: the columns of a :class:`BytesInUseReading`, in its fields' order (a row is read positionally)
SELECT_BYTES_IN_USE = (
    "SELECT run_id, idx, attempt, worker_id, allocator, bytes_in_use, time FROM bytes_in_use"
)


class BytesInUseRows(StoreRows):
    """Rows of ``bytes_in_use``."""

    def record_bytes_in_use(
        self, run_id: int, index: int, attempt: int, worker_id: int, allocator: str, bytes_in_use: int
    ) -> None:
        """What ``allocator`` counted in use in worker ``worker_id`` after ``attempt`` of trial ``index``."""
        from trainguard.exceptions import ConfigError

        if not isinstance(bytes_in_use, int) or isinstance(bytes_in_use, bool) or bytes_in_use < 0:
            raise ConfigError(f"bytes_in_use must be an int >= 0, e.g. 4194304, not {bytes_in_use!r}")
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO bytes_in_use (run_id, idx, attempt, worker_id, allocator, bytes_in_use,"
                " time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, index, attempt, worker_id, str(allocator), bytes_in_use, time.time()),
            )

    def bytes_in_use(self, run_id: int) -> list[BytesInUseReading]:
        """The run's readings in the order they were taken (none for a store written before them)."""
        rows = self._rows_if_table(
            f"{SELECT_BYTES_IN_USE} WHERE run_id=? ORDER BY time, idx, attempt", (run_id,)
        )
        return [BytesInUseReading(*row) for row in rows]
