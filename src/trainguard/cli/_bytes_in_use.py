"""``trainguard show``'s allocator evidence: each worker's C allocator bytes in use after each
trial, and one line per worker saying whether it rose trial over trial."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["by_trial", "worker_trend", "worker_trends", "trend_line", "trend_lines", "bytes_in_use_json"]

#: the most workers given a line of their own; the others are counted in one line
MAX_WORKER_LINES = 8

_VERDICTS = {
    "rises": "the worker's native memory grows",
    "slight": "a slight rise, below what a leak is called from",
    "flat": "flat",
    "unclear": "too uneven to tell",
    "too_few": "too few trials to tell",
}


def by_trial(readings: Sequence[Any]) -> dict[int, int]:
    """``{trial index: bytes in use after its last recorded attempt}``."""
    out: dict[int, tuple[int, int]] = {}
    for r in readings:
        if r.index not in out or r.attempt >= out[r.index][0]:
            out[r.index] = (r.attempt, r.bytes_in_use)
    return {index: value for index, (_, value) in out.items()}


def worker_trends(readings: Sequence[Any]) -> list[dict[str, Any]]:
    """Per worker, in worker order: its readings in the order its trials ended, the allocator and
    :func:`worker_trend` of them."""
    series: dict[int, list[Any]] = {}
    for r in sorted(readings, key=lambda r: r.time):
        series.setdefault(r.worker_id, []).append(r)
    out = []
    for worker_id in sorted(series):
        rows = series[worker_id]
        values = [r.bytes_in_use for r in rows]
        out.append(
            {
                **worker_trend(worker_id, rows[-1].allocator, values),
                "trials": [r.index for r in rows],
                "bytes_in_use": values,
            }
        )
    return out


#: the most readings of one worker the trend reads: Theil-Sen pairs every two (O(n**2) memory),
#: so a worker of 30,000 trials needed gigabytes; an even sample keeps the first and the last
TREND_POINTS = 512


def worker_trend(worker_id: int, allocator: str, values: Sequence[int]) -> dict[str, Any]:
    """One worker's ``{"worker_id", "allocator", "trend"}``: :func:`~trainguard.leaks.stats.trial_bytes_trend`
    of its readings, over an even sample of :data:`TREND_POINTS` of them when it has more (the
    slope, its interval and the settled point read back per trial; ``n`` stays the count of all)."""
    from trainguard._slope import evenly_sampled
    from trainguard.leaks.stats import TRIAL_RISE_BYTES, trial_bytes_trend

    n = len(values)
    if n <= TREND_POINTS:
        trend = trial_bytes_trend(values)
    else:
        _, sampled = evenly_sampled(values, TREND_POINTS)
        spacing = (n - 1) / (len(sampled) - 1)  # trials between two sampled readings
        step = trial_bytes_trend([int(v) for v in sampled], min_rise_bytes=TRIAL_RISE_BYTES * spacing)
        trend = dataclasses.replace(
            step,
            per_trial_bytes=step.per_trial_bytes / spacing,
            ci_low=step.ci_low / spacing,
            ci_high=step.ci_high / spacing,
            n=n,
            settled_from=round(step.settled_from * spacing),
        )
    return {"worker_id": worker_id, "allocator": allocator, "trend": dataclasses.asdict(trend)}


def trend_line(worker: dict[str, Any], *, named: bool) -> str:
    """One worker's line, e.g. ``bytes in use after each trial (glibc): 41.2 MiB → 58.9 MiB over 8
    trials, +2.5 MiB/trial (the worker's native memory grows)``."""
    from trainguard.units import format_bytes

    trend = worker["trend"]
    who = f"worker {worker['worker_id']}: " if named else ""
    n = trend["n"]
    shown = f"{format_bytes(trend['first_bytes'])} → {format_bytes(trend['last_bytes'])} over {n} trials"
    if n == 1:
        shown = f"{format_bytes(trend['first_bytes'])} after 1 trial"
    slope = trend["per_trial_bytes"]
    rate = f", {'+' if slope >= 0 else '-'}{format_bytes(abs(slope))}/trial" if n >= 2 else ""
    if trend.get("settled_from"):
        rate += f" after the first {trend['settled_from']}"
    return (
        f"{who}bytes in use after each trial ({worker['allocator']}): {shown}{rate} "
        f"({_VERDICTS.get(trend['status'], trend['status'])})"
    )


#: what a worker's line adds when the policy recycled it and named why it grew
_RECYCLED = {"retention": "recycled for retention", "leak": "recycled for a leak"}


def trend_lines(
    readings: Sequence[Any],
    ended: Mapping[int, str | None] | None = None,
    *,
    workers: Sequence[dict[str, Any]] | None = None,
) -> list[str]:
    """The lines ``show`` prints: none when no bytes in use were recorded (an allocator without
    the count, or a store written before they were). ``ended``: the cause each recycled worker's
    policy named (``"leak"``, ``"retention"``); such a worker's line says which. ``workers``:
    the :func:`worker_trend` of each worker, in worker order, when already made (``readings`` is
    then not read)."""
    if workers is None:
        workers = worker_trends(readings)
    named = len(workers) > 1
    ended = ended or {}
    lines = []
    for w in workers[:MAX_WORKER_LINES]:
        why = _RECYCLED.get(ended.get(w["worker_id"]) or "")
        lines.append(trend_line(w, named=named) + (f"; {why}" if why else ""))
    rest = workers[MAX_WORKER_LINES:]
    if rest:
        rising = sum(w["trend"]["status"] == "rises" for w in rest)
        lines.append(f"{len(rest)} more workers ({rising} of them rising): see show --json")
    return lines


def bytes_in_use_json(readings: Sequence[Any]) -> dict[str, Any]:
    """``show --json``'s ``bytes_in_use``: every reading, and each worker's trend."""
    return {
        "readings": [dataclasses.asdict(r) for r in readings],
        "workers": worker_trends(readings),
    }
