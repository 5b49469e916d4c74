"""Each trial's memory columns, from the one per-trial record (the store's ``TrialRecord`` or a
Runner's ``TrialResult``: both are a :class:`~trainguard._outcome.TrialOutcome`).

The one owner of what trainguard writes where people log: the MLflow export's metrics and tags,
the Optuna integration's ``trainguard_*`` user attributes, and Ray Tune-style result rows all
come from :func:`memory_columns`. Pure: no store, no process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["memory_columns", "run_columns", "tune_row", "result_numbers", "COLUMNS"]

#: the per-trial columns, in the order they are shown
COLUMNS = ("status", "peak_rss_bytes", "growth_bytes", "duration_s", "worker_id", "attempts")


def memory_columns(outcome: Any, previous_peak_bytes: int | None = None) -> dict[str, Any]:
    """``status``, ``peak_rss_bytes``, ``growth_bytes`` (this trial's peak minus the previous
    trial's peak in the same worker; None for a worker's first trial or an unknown peak),
    ``duration_s``, ``worker_id`` and ``attempts`` of one trial, plus ``failure`` (the cause) when
    it failed."""
    peak = outcome.peak_rss_bytes
    growth = peak - previous_peak_bytes if peak is not None and previous_peak_bytes is not None else None
    columns: dict[str, Any] = {
        "status": outcome.status,
        "peak_rss_bytes": peak,
        "growth_bytes": growth,
        "duration_s": outcome.duration_s,
        "worker_id": outcome.worker_id,
        "attempts": outcome.attempts,
    }
    error = outcome.error
    if outcome.status != "ok" and error is not None:
        columns["failure"] = error.status or "failed"
        columns["message"] = error.message[:500]
    return columns


def run_columns(outcomes: Iterable[Any]) -> list[dict[str, Any]]:
    """:func:`memory_columns` of every trial of a run, in index order, each trial's growth taken
    against the trial its worker ran before it (in the order trials finished, index for ties)."""
    ordered = sorted(outcomes, key=lambda o: o.index)
    by_worker = sorted(
        (o for o in ordered if o.worker_id is not None),
        key=lambda o: (o.worker_id, getattr(o, "finished_at", None) or 0.0, o.index),
    )
    previous: dict[int, int | None] = {}
    last: dict[int, int | None] = {}
    for outcome in by_worker:
        previous[outcome.index] = last.get(outcome.worker_id)
        if outcome.peak_rss_bytes is not None:
            last[outcome.worker_id] = outcome.peak_rss_bytes
    return [{"index": o.index, **memory_columns(o, previous.get(o.index))} for o in ordered]


def result_numbers(value: Any, prefix: str = "") -> dict[str, float]:
    """The numbers in a trial's result: the value itself (``value``), or a dict's numeric entries
    (nested dicts as ``a.b``); NaN and infinities left out (trackers reject them)."""
    out: dict[str, float] = {}
    if isinstance(value, bool):
        return out
    if isinstance(value, (int, float)):
        if math.isfinite(float(value)):
            out[prefix or "value"] = float(value)
        return out
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(result_numbers(item, f"{prefix}{key}" if not prefix else f"{prefix}.{key}"))
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def tune_row(
    outcome: Any, columns: Mapping[str, Any], trial_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """One trial as a Ray Tune result row: ``trial_id``, the result's numbers, ``time_total_s``,
    ``done``, the params as ``config/NAME``, and the memory columns."""
    row: dict[str, Any] = {"trial_id": trial_ids[outcome.index] if trial_ids else f"{outcome.index:05d}"}
    row.update(result_numbers(outcome.value))
    row["time_total_s"] = outcome.duration_s
    row["done"] = outcome.status in ("ok", "failed")
    for key, value in (outcome.params or {}).items():
        row[f"config/{key}"] = (
            value if isinstance(value, (int, float, str, bool)) or value is None else _text(value)
        )
    row.update(columns)
    return row
