"""The leak check report's data: :class:`LeakReportData`, read from a
:class:`~trainguard.leaks.LeakReport` (or its ``to_dict()``, the ``--json`` output) and checked
field by field, so that the renderer (``_leak.py``) only turns it into markup.

A report made by another version, or a dict written by hand, may lack any field or hold a wrong
type in it: each is read defensively (a missing or non-finite number is None, shown as "-").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["LeakReportData", "AttributionRow", "CountEvidence"]

#: the attribution fields the table has columns for; any other scalar field gets a column of its own
_KNOWN_GROWTH_KEYS = ("kind", "count_per_iter", "bytes_per_iter", "detail", "text")

Point = tuple[float, float]


class _HasToDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (a bool, a string, NaN and infinities are None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class AttributionRow:
    """One kind (or allocation site) that grows, with the report's extra fields in ``extras``
    (one per :attr:`LeakReportData.extra_keys`, None where absent)."""

    kind: Any
    count_per_iter: float | None
    bytes_per_iter: float | None
    detail: Any
    extras: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class CountEvidence:
    """The exact counts of live objects: their status and note, and the kinds that rose with
    their scalar fields flattened (nested dicts one level down as ``outer inner``)."""

    status: Any
    note: Any
    keys: tuple[str, ...]
    kinds: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class LeakReportData:
    """What the leak check's report shows: the series, the fitted line and its band, the numbers,
    what grows, and the notes."""

    verdict: str
    reason: str
    metric: str
    warmup_iterations: int
    slope: float | None
    ci_low: float | None
    ci_high: float | None
    #: (iteration, bytes) of each reading, and of the readings before malloc_trim where they differ
    series: tuple[Point, ...]
    untrimmed: tuple[Point, ...]
    #: (iteration, bytes) of live memory: bytes in use plus RSS outside glibc's heaps, where read
    live: tuple[Point, ...]
    gpu: tuple[Point, ...]
    #: the Theil-Sen line over the readings after the warm-up, its ends; and the 95 % band's outline
    fit: tuple[Point, Point] | None
    band: tuple[Point, ...] | None
    attribution: tuple[AttributionRow, ...]
    extra_keys: tuple[str, ...]
    counts: CountEvidence | None
    #: the raw report, for the numbers shown as they are (iterations, readings, timings, notes)
    fields: Mapping[str, Any]

    @classmethod
    def from_report(cls, report: _HasToDict | Mapping[str, Any]) -> LeakReportData:
        d: Mapping[str, Any] = report if isinstance(report, Mapping) else report.to_dict()
        series = [
            r for r in d.get("series") or [] if isinstance(r, dict) and number(r.get("bytes")) is not None
        ]
        warm = int(d.get("warmup_iterations") or 0)
        slope = number(d.get("slope_bytes_per_iter"))
        lo, hi = number(d.get("ci_low_bytes_per_iter")), number(d.get("ci_high_bytes_per_iter"))
        points = tuple((float(r["iteration"]), float(r["bytes"])) for r in series)
        untrimmed = tuple(
            (float(r["iteration"]), float(r["untrimmed_bytes"]))
            for r in series
            if number(r.get("untrimmed_bytes"))
        )
        if not any(abs(u - y) > 0 for (_, u), (_, y) in zip(untrimmed, points, strict=False)):
            untrimmed = ()  # the same as the readings: not drawn
        fit, band = _fit(points, warm, slope, lo, hi)
        growth = [g for g in d.get("growth_by_kind") or [] if isinstance(g, dict)]
        extra_keys = _extra_keys(growth)
        return cls(
            verdict=str(d.get("verdict") or "inconclusive"),
            reason=str(d.get("reason") or ""),
            metric=str(d.get("metric") or "memory"),
            warmup_iterations=warm,
            slope=slope,
            ci_low=lo,
            ci_high=hi,
            series=points,
            untrimmed=untrimmed,
            live=tuple(
                (float(r["iteration"]), float(r["live_bytes"])) for r in series if number(r.get("live_bytes"))
            ),
            gpu=tuple(
                (float(r["iteration"]), float(r["gpu_bytes"])) for r in series if number(r.get("gpu_bytes"))
            ),
            fit=fit,
            band=band,
            attribution=tuple(
                AttributionRow(
                    g.get("kind", ""),
                    number(g.get("count_per_iter")),
                    number(g.get("bytes_per_iter")),
                    g.get("detail") or "",
                    tuple(g.get(k) for k in extra_keys),
                )
                for g in growth
            ),
            extra_keys=extra_keys,
            counts=_counts(d.get("counts")),
            fields=d,
        )

    def number(self, key: str) -> float | None:
        """The report's field ``key`` as a finite number, or None."""
        return number(self.fields.get(key))


def _fit(
    points: tuple[Point, ...], warm: int, slope: float | None, lo: float | None, hi: float | None
) -> tuple[tuple[Point, Point] | None, tuple[Point, ...] | None]:
    """The fitted line through the readings after the warm-up (its intercept the median residual)
    and the outline of its 95 % band, pivoting on the kept readings' centre."""
    kept = [(x, y) for x, y in points if x >= warm]
    if slope is None or len(kept) < 2:
        return None, None
    kx = [k[0] for k in kept]
    intercept = statistics.median(y - slope * x for x, y in kept)
    x0, x1 = kx[0], kx[-1]
    xc = sum(kx) / len(kx)
    yc = intercept + slope * xc
    fit = ((x0, intercept + slope * x0), (x1, intercept + slope * x1))
    if lo is None or hi is None:
        return fit, None
    band = (
        (x0, yc + lo * (x0 - xc)),
        (x1, yc + lo * (x1 - xc)),
        (x1, yc + hi * (x1 - xc)),
        (x0, yc + hi * (x0 - xc)),
    )
    return fit, band


def _extra_keys(growth: list[dict[str, Any]]) -> tuple[str, ...]:
    keys: list[str] = []
    for g in growth:
        for k, v in g.items():
            if (
                k not in _KNOWN_GROWTH_KEYS
                and k not in keys
                and (v is None or isinstance(v, (str, int, float)))
            ):
                keys.append(k)
    return tuple(keys)


def _flat(item: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar fields of ``item``, nested dicts one level down as ``outer inner``."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        label = f"{prefix}{key}".replace("_", " ")
        if isinstance(value, dict) and not prefix:
            out.update(_flat(value, prefix=f"{key} "))
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[label] = value
    return out


def _counts(counts: Any) -> CountEvidence | None:
    if not isinstance(counts, dict) or not counts:
        return None
    kinds = tuple(_flat(k) for k in counts.get("kinds") or [] if isinstance(k, dict))
    keys: list[str] = []
    for k in kinds:
        keys.extend(key for key in k if key not in keys)
    return CountEvidence(counts.get("status", "-"), counts.get("note"), tuple(keys), kinds)
