"""A row of the ``trials`` table read back: the columns selected and the :class:`TrialRecord`
decoded from them, the one reading that :meth:`Store.trials` and the run view's trial page share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainguard.store._codec import _load_failure, _loads
from trainguard.store._records import TrialRecord

__all__ = ["TRIAL_COLUMNS", "trial_record"]

#: The columns :func:`trial_record` decodes, in its order.
TRIAL_COLUMNS = (
    "run_id, idx, params_json, status, value_json, error_json, attempts, peak_rss_bytes, worker_id,"
    " duration_s, finished_at"
)


def trial_record(row: Sequence[Any], seeds: dict[int, int]) -> TrialRecord:
    """The trial in ``row`` (the :data:`TRIAL_COLUMNS`), with its seed from ``seeds`` (by index)."""
    return TrialRecord(
        run_id=row[0],
        index=row[1],
        params=_loads(row[2]),
        status=row[3],
        value=_loads(row[4]),
        error=_load_failure(row[5]),
        attempts=row[6],
        peak_rss_bytes=row[7],
        worker_id=row[8],
        duration_s=row[9],
        finished_at=row[10],
        seed=seeds.get(row[1]),
    )
