"""The store's stages of staged trials: each stage's checkpoint, peak and duration.

One table's section of :class:`~trainguard.store.Store` (see ``_base.py``).
"""

from __future__ import annotations

from trainguard.exceptions import ConfigError
from trainguard.store._base import StoreRows
from trainguard.store._codec import _check_attempt_key, _check_int
from trainguard.store._records import (
    StageRecord,
)
from trainguard.store._schema import (
    STAGE_EVENTS,
)

#: the columns of a :class:`StageRecord`, in its fields' order (a row is read positionally)
_SELECT_STAGES = (
    "SELECT run_id, idx, attempt, stage, worker_id, time, rss_bytes, peak_rss_bytes, event, note FROM stages"
)


class StageRows(StoreRows):
    """The store's stages of staged trials."""

    def add_stage(
        self,
        run_id: int,
        index: int,
        attempt: int,
        stage: int,
        *,
        event: str,
        worker_id: int | None = None,
        rss_bytes: int | None = None,
        peak_rss_bytes: int | None = None,
        note: str | None = None,
    ) -> None:
        """Record a staged trial's ``checkpoint`` (stage ``stage`` committed), ``resume`` (from
        stage ``stage``) or ``restart`` (from the beginning; ``note`` says why)."""
        _check_attempt_key(run_id, index, attempt)
        _check_int(stage, "stage", minimum=0)
        if event not in STAGE_EVENTS:
            raise ConfigError(f"stage event {event!r} is not one of {', '.join(STAGE_EVENTS)}")
        with self._write_to_trial(run_id, index) as (conn, now):
            conn.execute(
                "INSERT INTO stages (run_id, idx, attempt, stage, worker_id, time, rss_bytes, peak_rss_bytes,"
                " event, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, index, attempt, stage, worker_id, now, rss_bytes, peak_rss_bytes, event, note),
            )

    def stages(self, run_id: int, index: int | None = None) -> list[StageRecord]:
        """A run's stage history (of one trial when ``index`` is given), in the order written."""
        rows = self._rows_of_run(
            _SELECT_STAGES, run_id, ("idx", index), order_by="stage_pk", added_later=True
        )
        return [StageRecord(*row) for row in rows]
