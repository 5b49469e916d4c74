"""The store's worker processes: when each started, its config, and why it ended.

One table's section of :class:`~trainguard.store.Store` (see ``_base.py``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.store._base import StoreRows
from trainguard.store._codec import _check_int, _dumps, _loads, _loads_object, _record_of_row
from trainguard.store._records import WorkerRecord
from trainguard.store._schema import WORKER_REASONS

logger = logging.getLogger("trainguard.store._store")


#: the columns of a :class:`WorkerRecord`, in its fields' order (a row is read positionally)
_SELECT_WORKERS = (
    "SELECT run_id, worker_id, pid, config_json, started_at, ended_at, reason, detail_json FROM workers"
)


class WorkerRows(StoreRows):
    """The store's worker processes."""

    def start_worker(self, run_id: int, worker_id: int, pid: int, config: dict[str, Any]) -> None:
        """Record that worker ``worker_id`` (process ``pid``) started with ``config``."""
        _check_int(run_id, "run_id")
        _check_int(worker_id, "worker_id")
        _check_int(pid, "pid")
        config_json = _dumps(config if config is not None else {}, "worker config")
        now = time.time()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO workers (run_id, worker_id, pid, config_json, started_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, worker_id, pid, config_json, now),
            )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def end_worker(self, run_id: int, worker_id: int, *, reason: str, detail: dict[str, Any] | None) -> bool:
        """Record why the worker ended (a key of :data:`WORKER_REASONS`) with numbers in ``detail``.

        Returns:
            True when recorded; False when that worker was not open (already ended, or never started).
        """
        _check_int(run_id, "run_id")
        _check_int(worker_id, "worker_id")
        if reason not in WORKER_REASONS:
            raise ConfigError(f"worker end reason {reason!r} is not one of {', '.join(WORKER_REASONS)}")
        detail_json = _dumps(detail, "worker detail") if detail is not None else None
        now = time.time()
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE workers SET ended_at=?, reason=?, detail_json=? WHERE worker_pk=(SELECT max(worker_pk)"
                " FROM workers WHERE run_id=? AND worker_id=? AND ended_at IS NULL)",
                (now, reason, detail_json, run_id, worker_id),
            )
            if cur.rowcount == 0:
                logger.debug("end_worker: worker %s of run %s is not open", worker_id, run_id)
                return False
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))
        return True

    def workers(self, run_id: int) -> list[WorkerRecord]:
        """The run's workers in the order they started."""
        rows = self._rows_of_run(_SELECT_WORKERS, run_id, order_by="worker_pk")
        return [_record_of_row(WorkerRecord, r, config=_loads_object, detail=_loads) for r in rows]
