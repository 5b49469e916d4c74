"""Allocator evidence in the leak check: the C allocator's bytes in use at each reading.

RSS alone needs about 120 calls for memory no Python object shows (a C extension's buffers, a
framework's C++ caches), because page faults of temporaries and pages an allocator keeps after
``free`` make it noisy. The allocator's own count of bytes in use
(:class:`trainguard.probes.allocator.AllocatorProbe`) has neither noise: a buffer kept per call
raises it by the same amount every call. Here:

- :class:`AllocatorSeries` reads it at each reading (row key :data:`KEY`), and measures the
  check's own bookkeeping: bytes in use once the reading is recorded (its row, census points)
  minus bytes in use when it was read. That is exact, is subtracted from the series (so the check
  never sees itself grow) and sizes the tolerance's floor for the RSS series
  (``_plan.auto_tolerance``).
- :func:`support`: a rise of bytes in use at every reading, past a fill allowance, not slowing
  (``stats.allocator_trend``), lets a ``leak`` through before the warm-up wait, as count evidence
  does, with RSS confirming at the check's own level (``_plan.look``). Never a leak by itself.
- :func:`report_dict`: what the report says of it: the allocator, its cost per reading, the
  bookkeeping, the trend, and when RSS grows while bytes in use do not, that the allocator keeps
  freed memory (retention or fragmentation), not a leak by itself.

The figure is the step process's only: children a step starts are in the tree's RSS/PSS but not
in it, and the report says so.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainguard.leaks import stats
from trainguard.units import format_bytes

__all__ = [
    "KEY",
    "AllocatorSeries",
    "NativeSupport",
    "support",
    "visible_share",
    "report_dict",
    "RETENTION_NOTE",
    "VISIBLE_SHARE",
    "beside_counts",
]

#: the row key of bytes in use (the check's own bookkeeping subtracted)
KEY = "allocated_bytes"
#: the row keys of glibc's heaps as resident (``probes.heaps``), of RSS outside them, and of live
#: memory: bytes in use plus RSS outside the heaps (RSS less the free memory malloc keeps)
HEAP_KEY = "heap_resident_bytes"
OUTSIDE_KEY = "outside_heaps_bytes"
LIVE_KEY = "live_bytes"
#: Of the step time since the last reading, what reading the heaps' residency may cost (a
#: TensorFlow process maps about 1,800 regions: 3-5 ms a reading); when it would cost more the
#: reading goes without it, and RSS is judged whole as before.
HEAP_SHARE = 0.01

RETENTION_NOTE = (
    "RSS grows, bytes in use do not: the allocator keeps freed memory (retention or fragmentation), "
    "not a leak of live allocations; try jemalloc (`trainguard run --allocator jemalloc`) or `malloc_trim`"
)


def heaps_affordable(costs_s: list[float], calls_s: float | None) -> bool:
    """Whether reading the heaps now keeps their cost within :data:`HEAP_SHARE` of ``calls_s``, the
    step time since the heaps were last read (None: not known yet). The first two readings always
    read them; after that the cost is the least of the last five readings'.

    ``calls_s`` runs from the last reading *of the heaps*, not from the last reading: a reading that
    skips them adds no new cost, so with the step time of one reading alone five slow readings in a
    row (a loaded machine: 1.7 ms, then 5.8 ms beside a 0.4 s step on two busy cores) switched the
    split off for the rest of the run (8 of 35 readings split, a loaded CI run). Counted from the
    last heaps reading, each skipped reading earns the next one: the split gets sparser under load,
    holds the share over the run, and its cost is measured again."""
    if len(costs_s) < 2 or calls_s is None:
        return True
    return min(costs_s[-5:]) <= HEAP_SHARE * calls_s


class AllocatorSeries:
    """The reading side: bytes in use at each reading, and what the check itself keeps."""

    def __init__(self, enabled: bool = True) -> None:
        from trainguard.probes.allocator import AllocatorProbe
        from trainguard.probes.heaps import HeapResidency

        self.probe = AllocatorProbe() if enabled else None
        self.bookkeeping_bytes = 0
        #: bytes the check kept per reading (measured), and what each read cost
        self.kept_per_reading: list[int] = []
        self.kept_by_census: list[int] = []
        self.row_bytes: list[int] = []
        self.read_costs_s: list[float] = []
        self._raw: int | None = None
        #: glibc's heaps as resident (``probes.heaps``), and what each reading of them cost
        self.heaps = (
            HeapResidency(self.probe.name) if self.probe is not None and self.probe.available else None
        )
        self.heap_costs_s: list[float] = []
        #: the step time since the heaps were last read (:func:`heaps_affordable`)
        self._calls_since_heaps_s: float | None = None

    @property
    def available(self) -> bool:
        return self.probe is not None and self.probe.available

    def read(self) -> int | None:
        """Bytes in use now, less the check's own bookkeeping so far (None when unavailable)."""
        if self.probe is None:
            return None
        t0 = time.perf_counter()
        raw = self.probe.read()
        self.read_costs_s.append(time.perf_counter() - t0)
        self._raw = raw
        return None if raw is None else raw - self.bookkeeping_bytes

    def read_heaps(self, calls_s: float | None) -> tuple[int, int] | None:
        """Resident bytes of glibc's heaps and RSS outside them, when available and affordable
        (:func:`heaps_affordable`: at most :data:`HEAP_SHARE` of the step time since the heaps were
        last read; ``calls_s`` is the step time since the last reading, added up here).

        RSS is read again right after the heaps, not taken from the reading before them: reading
        ``/proc/self/maps`` (150 KB for TensorFlow) allocates inside the heaps, touching pages
        ``malloc_trim`` had given back, and RSS read before it would put those pages outside
        (measured: 105-128 KiB of noise outside the heaps a reading, against 11 KiB read in pairs).

        What the check itself keeps as Python objects (its rows, census points) stays in the
        series, as it does in RSS, and the tolerance's floor covers it: subtracting the objects'
        sizes overcorrected (pymalloc places them in pages the census's temporaries had already
        touched: -14 KiB a reading), and measuring RSS around the recording counts the step's own
        threads (a stack freed as a thread ends) as the check's."""
        if self.heaps is None or not self.heaps.available:
            return None
        if calls_s is not None:
            self._calls_since_heaps_s = (self._calls_since_heaps_s or 0.0) + calls_s
        if not heaps_affordable(self.heap_costs_s, self._calls_since_heaps_s):
            return None
        self._calls_since_heaps_s = None
        from trainguard.process import statm_rss_bytes

        t0 = time.perf_counter()
        value = self.heaps.read()
        rss = statm_rss_bytes(os.getpid())
        self.heap_costs_s.append(time.perf_counter() - t0)
        if value is None or rss is None:
            return None
        return value, rss - value

    def settle(self, collect: bool = False, row_bytes: int = 0) -> None:
        """After the reading is recorded (row, census): what that added is the check's own.
        ``collect``: a census ran; its cyclic garbage is collected first, or it would count as
        kept here and be freed during the next calls (as if the step freed it). ``row_bytes``: the
        reading's row as Python objects (pymalloc's, which bytes in use do not see), for the floor."""
        self.row_bytes.append(row_bytes)
        if self.probe is None or self._raw is None:
            return
        if collect:
            gc.collect()
        now = self.probe.read()
        if now is None:
            return
        kept = now - self._raw
        self.bookkeeping_bytes += kept
        # the rows are what the check keeps for good; census points are capped (thinned), so
        # what a census keeps is subtracted but does not size the tolerance's floor
        (self.kept_by_census if collect else self.kept_per_reading).append(kept)
        self._raw = None

    def bookkeeping_per_reading(self) -> float | None:
        """The median bytes the check kept per reading without a census, its row included (None
        before one reading)."""
        if not self.row_bytes:
            return None
        kept = float(np.median(self.kept_per_reading)) if self.kept_per_reading else 0.0
        return kept + float(np.median(self.row_bytes))


@dataclass(frozen=True, slots=True)
class NativeSupport:
    """What bytes in use say at one look: ``status`` from :func:`stats.allocator_trend` (or
    ``"unavailable"``), the rate per call, and the readings and calls of the rising run."""

    status: str
    bytes_per_iter: float
    readings: int
    calls: int

    @property
    def supports(self) -> bool:
        return self.status == "grows"


def _pairs(series: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    rows = [r for r in series if r.get(KEY) is not None]
    return [int(r["iteration"]) for r in rows], [int(r[KEY]) for r in rows]


def support(series: list[dict[str, Any]], *, alpha: float, tolerance: float) -> NativeSupport:
    """Whether bytes in use rise like a leak over the readings so far (see ``stats.allocator_trend``)."""
    xs, ys = _pairs(series)
    if len(ys) < 3:
        return NativeSupport("unavailable" if not ys else "flat", 0.0, len(ys), 0)
    trend = stats.allocator_trend(ys, xs, alpha=alpha, tolerance=tolerance)
    return NativeSupport(trend.status, trend.count_per_iter, trend.run_readings, trend.run_calls)


#: Of the rise of bytes in use, what Python-visible objects that rose (the census's kinds with exact
#: bytes: arrays, tensors, buffers) may explain before the rise stops being native evidence: the
#: growth is then the counts' to judge, with their own fill allowances (a bounded cache of 60
#: arrays of 512 KB rises bytes in use by exactly its arrays' bytes until it is full, as a native
#: leak would; the census sees the arrays, it sees nothing of memory kept through ``malloc``).
VISIBLE_SHARE = 0.5


def beside_counts(native: NativeSupport, counted: bool, kinds: Any) -> NativeSupport:
    """What a rise of bytes in use may say once the census is weighed: ``native`` when no
    Python-visible kind explains it; status ``"visible"`` when the census's rising kinds explain
    :data:`VISIBLE_SHARE` of it by their exact bytes (a bounded cache of arrays: the counts' own
    rules and fill allowances decide); status ``"uncounted"`` when no census could look
    (``counted`` false: counts off, left out for cost, or fewer than two so far). A cache of 60
    arrays of 1 MB rises bytes in use by exactly a leak's figure for 60 calls, so without a census
    the rise cannot pass the warm-up wait early."""
    if not native.supports:
        return native
    if not counted:
        return dataclasses.replace(native, status="uncounted")
    if visible_share(native, kinds) >= VISIBLE_SHARE:
        return dataclasses.replace(native, status="visible")
    return native


def visible_share(native: NativeSupport, kinds: Any) -> float:
    """The share of ``native``'s rise per call that the census's rising kinds explain by their
    exact bytes (``kinds``: ``_evidence.KindEvidence``; any that rose at all, filling or not)."""
    if native.bytes_per_iter <= 0:
        return 0.0
    visible = sum(max(k.trend.bytes_per_iter, 0.0) for k in kinds)
    return visible / native.bytes_per_iter


def rising(series: list[dict[str, Any]], *, readings: int = 3, min_bytes: float = 4096.0) -> bool:
    """Bytes in use rose by at least ``min_bytes`` at each of the last ``readings`` readings (the
    loop keeps reading call by call while they do, as it does for rising counts). 4 KiB: a
    reading call by call costs the check its bookkeeping per call, so small rises (the arena's
    own) must not keep a flat fast step in that phase."""
    _, ys = _pairs(series)
    if len(ys) <= readings:
        return bool(ys) and len(ys) < 2
    tail = np.diff(np.asarray(ys[-readings - 1 :], dtype=float))
    return bool(np.all(tail >= min_bytes))


def support_text(s: NativeSupport, allocator: str) -> str:
    return (
        f"the allocator's bytes in use ({allocator}) rose {format_bytes(s.bytes_per_iter, signed=True)}/call "
        f"at every one of {s.readings} readings over {s.calls} calls"
    )


def _slope(series: list[dict[str, Any]], warm_iter: int, key: str = KEY) -> float | None:
    rows = [r for r in series if r["iteration"] >= warm_iter and r.get(key) is not None]
    if len(rows) < 4:
        return None
    return float(stats.theil_sen([r[key] for r in rows], [r["iteration"] for r in rows]))


def _live_slope(series: list[dict[str, Any]], warm_iter: int, alpha: float, tolerance: float) -> float | None:
    """Live memory's slope as its own test saw it (its own warm-up, the estimate whose interval
    decided a ``no_leak`` on live memory), so that the report's figure is the reason's; the slope
    after RSS's warm-up where live memory was not read recently enough to be tested."""
    from trainguard.leaks._plan import live_decision

    decision = live_decision(series, alpha=alpha, tolerance=tolerance)
    if decision is not None and decision.slope is not None:
        return float(decision.slope.slope)
    return _slope(series, warm_iter, LIVE_KEY)


def heaps_dict(
    meter: AllocatorSeries, series: list[dict[str, Any]], warm_iter: int, *, alpha: float, tolerance: float
) -> dict[str, Any]:
    """The report's split of RSS at glibc's heaps (``probes.heaps``): the slopes of RSS inside and
    outside them after RSS's warm-up, of live memory after its own (:func:`_live_slope`), what a
    reading of them cost, and a line."""
    heaps = meter.heaps
    if heaps is None or not heaps.available:
        reason = heaps.reason if heaps is not None else "heap residency unavailable: no allocator evidence"
        return {"heaps_available": False, "heaps_text": reason}
    inside, outside = (_slope(series, warm_iter, key) for key in (HEAP_KEY, OUTSIDE_KEY))
    live = _live_slope(series, warm_iter, alpha, tolerance)
    cost = float(np.median(meter.heap_costs_s)) if meter.heap_costs_s else None
    if inside is None or outside is None:
        text = "RSS not split at glibc's heaps: too few readings could afford it (or child processes ran)"
    else:
        text = (
            f"RSS inside glibc's heaps {format_bytes(inside, signed=True)}/iter, outside them "
            f"{format_bytes(outside, signed=True)}/iter"
        )
        if live is not None:
            text += f"; live memory (bytes in use + outside) {format_bytes(live, signed=True)}/iter"
    if cost is not None:
        text += f"; a reading of the heaps costs {cost * 1e3:.1f} ms"
    return {
        "heaps_available": True,
        "heap_resident_slope_bytes_per_iter": inside,
        "outside_heaps_slope_bytes_per_iter": outside,
        "live_slope_bytes_per_iter": live,
        "heaps_cost_per_reading_s": cost,
        "heaps_text": text,
    }


def report_dict(
    meter: AllocatorSeries,
    series: list[dict[str, Any]],
    *,
    warm_iter: int,
    rss_slope: float | None,
    tolerance: float,
    alpha: float,
    last: NativeSupport | None,
    children: bool,
) -> dict[str, Any]:
    """The report's ``allocator`` entry (JSON, table, HTML all read it)."""
    probe = meter.probe
    name = probe.name if probe is not None else "off"
    if not meter.available or not any(r.get(KEY) is not None for r in series):
        reason = probe.reason if probe is not None else "allocator evidence turned off"
        return {"allocator": name, "available": False, "note": reason or "allocator evidence unavailable"}
    slope = _slope(series, warm_iter)
    costs = meter.read_costs_s[1:] or meter.read_costs_s
    cost = float(np.median(costs)) if costs else None
    kept = meter.bookkeeping_per_reading()
    notes = []
    if (
        rss_slope is not None
        and slope is not None
        and rss_slope >= tolerance
        and slope < max(tolerance, 0.1 * rss_slope)
    ):
        notes.append(RETENTION_NOTE)
    if children:
        notes.append(
            "bytes in use are the step process's only: the child processes the step started are in the "
            "tree's memory but not in this figure"
        )
    status = last.status if last is not None else None
    text = (
        f"{name}: bytes in use {format_bytes(slope, signed=True)}/iter after the warm-up"
        if slope is not None and math.isfinite(slope)
        else f"{name}: too few readings for a slope"
    )
    if cost is not None:
        text += f"; a reading costs {cost * 1e6:.1f} µs"
    if kept is not None:
        text += f"; the check kept {format_bytes(kept)} a reading (subtracted)"
    return heaps_dict(meter, series, warm_iter, alpha=alpha, tolerance=tolerance) | {
        "allocator": name,
        "available": True,
        "slope_bytes_per_iter": slope,
        "status": status,
        "supports_leak": bool(last is not None and last.supports),
        "cost_per_reading_s": cost,
        "bookkeeping_bytes_per_reading": kept,
        "text": text,
        "note": "; ".join(notes),
    }
