"""Why a worker's RSS grows, pure: a leak of live native memory, or memory its allocator keeps.

A worker's RSS after each trial and its C allocator's bytes in use after each trial (the worker
reads them after a ``gc.collect()``, :mod:`trainguard.probes.allocator`) are two series of the same
trials. When RSS grows and bytes in use grow with it, what the trials leave behind is live: a leak.
When RSS grows and bytes in use stay flat, the trials freed what they allocated and the allocator
kept the pages (fragmentation, arenas pinned by a few live objects): retention.

Each series' growth per trial is the robust slope of :func:`trainguard.leaks.stats.robust_slope`
(Theil-Sen, a robust noise scale, the lag-1 and long-run autocorrelation corrections, Student's t),
computed here in plain Python so the supervisor does not import numpy and scipy for a few dozen
numbers. The margins are the slopes' 95 % intervals, so they come from each series' own noise:

- RSS grows: the interval is above zero and the slope reaches :data:`RETENTION_MIN_GROWTH_BYTES`.
- ``"leak"``: bytes in use grow too, the interval above zero and the slope at least
  :data:`LEAK_SHARE` of the RSS slope (the share the leak check asks a kind to explain).
- ``"retention"``: the top of the bytes-in-use interval is under :data:`RETENTION_SHARE` of the RSS
  slope: nothing live explains the growth. Never when bytes in use grow as a leak does.
- anything else, or fewer than :data:`RETENTION_MIN_READINGS` trials with both readings: no cause.

Bytes in use count ``malloc``'s chunks only: Python's small objects live in pymalloc's arenas, which
are not in them, so a leak of small Python objects reads as retention here (the ``census`` option
counts those objects).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.runner.policy._tdist import t_quantile
from trainguard.runner.policy._values import median
from trainguard.units import format_bytes

__all__ = [
    "SlopeInterval",
    "GrowthCause",
    "slope_interval",
    "growth_cause",
    "RETENTION_MIN_READINGS",
    "RETENTION_MIN_GROWTH_BYTES",
    "RETENTION_SHARE",
    "LEAK_SHARE",
    "CAUSE_WINDOW",
]

#: Trials with both readings before a cause is named (the autocorrelation corrections start at 6).
RETENTION_MIN_READINGS = 6
#: RSS growth per trial from which a cause is looked for (``leaks.stats.TRIAL_RISE_BYTES``).
RETENTION_MIN_GROWTH_BYTES = 256 * 1024
#: Bytes in use grow for a leak when their slope is at least this share of RSS's.
LEAK_SHARE = 0.25
#: Bytes in use are flat for retention when their interval's top is under this share of RSS's slope.
RETENTION_SHARE = 0.1
#: The latest readings both slopes are read from (Theil-Sen is quadratic in them).
CAUSE_WINDOW = 32


@dataclass(frozen=True, slots=True)
class SlopeInterval:
    """The robust slope of a series (units per trial) and its two-sided interval."""

    slope: float
    low: float
    high: float
    n: int


@dataclass(frozen=True, slots=True)
class GrowthCause:
    """Why a worker's RSS grew: ``kind`` is ``"leak"`` or ``"retention"``; the two slopes it read."""

    kind: str
    rss: SlopeInterval
    in_use: SlopeInterval

    @property
    def words(self) -> str:
        rss = f"RSS grew {format_bytes(self.rss.slope, signed=True)}/trial"
        in_use = f"bytes in use grew {format_bytes(self.in_use.slope, signed=True)}/trial"
        if self.kind == "leak":
            return f"a leak: {rss} and the allocator's {in_use} with it"
        return (
            f"retention: {rss} while the allocator's bytes in use stayed flat "
            f"({format_bytes(self.in_use.slope, signed=True)}/trial): it keeps freed memory"
        )

    def values(self) -> dict[str, object]:
        return {
            "cause": self.kind,
            "rss_growth_per_trial_bytes": int(self.rss.slope),
            "in_use_growth_per_trial_bytes": int(self.in_use.slope),
            "in_use_growth_high_bytes": int(self.in_use.high),
            "cause_readings": self.rss.n,
        }


def _winsorised(resid: Sequence[float], scale: float) -> list[float]:
    mid = median(resid)
    r = [v - mid for v in resid]
    if scale > 0:
        r = [min(max(v, -3 * scale), 3 * scale) for v in r]
    mean = sum(r) / len(r)
    return [v - mean for v in r]


def _lag1(resid: Sequence[float], scale: float) -> float:
    n = len(resid)
    if n < 6:
        return 0.0
    r = _winsorised(resid, scale)
    denom = sum(v * v for v in r)
    if denom == 0:
        return 0.0
    rho = sum(a * b for a, b in zip(r[:-1], r[1:], strict=True)) / denom
    rho = (rho * n + 1.0) / (n - 3.0) + 1.0 / math.sqrt(n)
    return min(max(rho, 0.0), 0.8)


def _long_run(resid: Sequence[float], scale: float) -> tuple[float, float]:
    n = len(resid)
    if n < 6:
        return 1.0, float(n - 2)
    r = _winsorised(resid, scale)
    denom = sum(v * v for v in r)
    lags = int(math.ceil(n ** (1.0 / 3.0)))
    nu = 1.5 * n / (lags + 1)
    if denom == 0:
        return 1.0, nu
    acc = sum(
        (1.0 - k / (lags + 1)) * sum(a * b for a, b in zip(r[:-k], r[k:], strict=True))
        for k in range(1, lags + 1)
    )
    return 1.0 + 2.0 * acc / denom, nu


def _std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def slope_interval(values: Sequence[float], confidence: float = 0.95) -> SlopeInterval:
    """The robust slope per trial of ``values`` (read at trials ``0..n-1``) and its interval, as
    :func:`trainguard.leaks.stats.robust_slope` computes them; an infinite interval under 3 points."""
    y = [float(v) for v in values]
    n = len(y)
    if n < 3:
        slope = y[-1] - y[0] if n == 2 else 0.0
        return SlopeInterval(slope, -math.inf, math.inf, n)
    slope = median([(y[j] - y[i]) / (j - i) for i in range(n) for j in range(i + 1, n)])
    resid = [v - slope * i for i, v in enumerate(y)]
    mid = median(resid)
    resid = [v - mid for v in resid]
    mad = 1.4826 * median([abs(v) for v in resid])
    wins = _std([min(max(v, -3 * mad), 3 * mad) for v in resid]) if mad > 0 else 0.0
    scale = max(mad, wins, 0.5 * _std(resid))
    rho = _lag1(resid, scale)
    factor, nu = _long_run(resid, scale)
    inflation = max((1.0 + rho) / (1.0 - rho), factor)
    df = min(float(n - 2), nu)
    mean_x = (n - 1) / 2.0
    sxx = sum((i - mean_x) ** 2 for i in range(n))
    se = 1.05 * scale * math.sqrt(inflation / sxx)
    q = t_quantile(0.5 + confidence / 2, df) if se > 0 else 0.0
    return SlopeInterval(slope, slope - q * se, slope + q * se, n)


def growth_cause(rss_after_bytes: Sequence[int], bytes_in_use: Sequence[int | None]) -> GrowthCause | None:
    """``"leak"`` or ``"retention"`` from a worker's two per-trial series (aligned, a None where the
    allocator had no reading), or None: too few readings, RSS not growing, or no clear cause."""
    pairs = [(r, b) for r, b in zip(rss_after_bytes, bytes_in_use, strict=False) if b is not None]
    pairs = pairs[-CAUSE_WINDOW:]
    if len(pairs) < RETENTION_MIN_READINGS:
        return None
    rss = slope_interval([r for r, _ in pairs])
    if not (rss.low > 0 and rss.slope >= RETENTION_MIN_GROWTH_BYTES):
        return None
    in_use = slope_interval([float(b) for _, b in pairs if b is not None])
    if in_use.low > 0 and in_use.slope >= LEAK_SHARE * rss.slope:
        return GrowthCause("leak", rss, in_use)
    if in_use.high < RETENTION_SHARE * rss.slope:
        return GrowthCause("retention", rss, in_use)
    return None
