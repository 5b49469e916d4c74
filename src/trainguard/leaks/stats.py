"""Leak statistics: pure functions over a memory series (bytes after each iteration).

Nothing here measures anything or touches a process: every function takes a sequence of floats
(``y``, bytes) and optionally the iteration numbers they were read at (``x``, defaults to
``0, 1, 2, ...``) and returns a frozen record. :func:`robust_slope` is also what ``compare``, the
run report and the Keras callback use for growth per trial or epoch (it and the other slope
functions live in ``trainguard/_slope.py``, below both the leak check and the report, and are
re-exported here); the runner's recycling policy computes the same Theil-Sen slope in plain Python
(``runner/policy/_recycle.py``), without an interval.

The pieces, and why each is there:

* :func:`robust_slope` -- the Theil-Sen slope (the median of all pairwise slopes) with a robust
  standard error (noise scale from the MAD of the residuals) and a t test. Medians ignore the
  spikes RSS series are full of (a buffer held at the moment of a reading) where least squares
  follows them. RSS noise is not independent from one iteration to the next (the allocator keeps
  or returns memory for a few iterations in a row), which makes an uncorrected test call noise a
  trend far more often than its nominal level; the variance is therefore inflated by the larger of
  the AR(1) factor ``(1 + rho) / (1 - rho)``, with a bias-corrected, deliberately high estimate of
  ``rho``, and a Bartlett (Newey-West) long-run variance over ``ceil(n ** (1/3))`` lags (never
  deflated). Lag 1 alone misses the correlation at longer lags of noise that is partly white and
  partly AR(1), and an estimated variance makes the t statistic's tails heavier than Student's
  ``n - 2`` degrees of freedom say: at the levels the leak check reads (about 1e-4 a look) that
  doubled its false leaks on plain noise (0.16 % of 30,000 series of ``bench/leak_false_rate.py``'s
  noise). The test and the interval therefore use the long-run estimate's equivalent degrees of
  freedom, ``1.5 n / (lags + 1)`` (Bartlett's kernel: the estimate's variance is ``4/3 (lags + 1) / n``
  of its square), when that is fewer than ``n - 2``: 0.09 % then, and 95 % intervals of short
  series that miss closer to their nominal 5 % (``bench/slope_interval_coverage.py``). A rank
  test (Mann-Kendall) was tried first: its statistic has a ceiling at small n, so a clean
  200 KB/iter leak over 14 readings could never reach a strict level.
* :func:`detect_warmup` -- where the series settles: the MSER rule used for simulation warm-up
  (minimise the standard error of the mean of what is kept), applied to the residuals from a
  robust line through the second half, so that a steady leak is "settled" from its start and a
  series that grows and then levels off is cut where it levels off.
* :func:`detect_steps` -- single large jumps (an allocator mapping a new arena, a cache filling
  once). One or two jumps are not a leak; a staircase of them is.
* :func:`plateau_test` -- growth that stops is not a leak: compares the growth rate during the
  warm-up with the rate after it.
* :func:`decide` -- one look of a sequential decision. :func:`look_schedule` gives geometrically
  spaced looks and :func:`alpha_per_look` splits the false-positive budget across them
  (Bonferroni), so that looking many times does not raise the false-positive rate above
  ``alpha``. A leak is only called when the growth is significant at that look's level, at least
  ``tolerance`` bytes per iteration, persists in the most recent half of the window (not slowing
  down), and is not one or two jumps.
* :func:`count_trend` -- exact counts of live objects (tensors, graph operations, arrays, entries
  of a container) have no allocator noise, so their evidence is of another kind: see below.

Count evidence (:func:`count_trend`, used by ``leakcheck`` to call a leak before its 120-call
warm-up gate). Under the null hypothesis that a kind's count does not trend (its readings are
exchangeable: objects that come and go), the chance that ``m`` readings come out in strictly
increasing order is ``1/m!`` whatever their distribution (ties only lower it). That is the test's
p-value; the loop splits its false-positive budget over the looks and the kinds tested
(Bonferroni), so that 10 readings (``1/10! = 2.8e-7``) are enough for hundreds of kinds. Exchangeable
is not the only way not to leak, though: a bounded cache or pool fills one entry per call and then
stops, and before it is full its count rises exactly like a leak's. Nothing in the counts can tell
the two apart until the bound is passed, so a count supports a leak only when (1) it has risen at
every reading over at least ``min_calls`` calls (15), (2) it has not slowed down (the recent half
of the run grows at least ``1 - max_slowdown`` times as fast as the first half, for the count and,
when the kind carries bytes, for its bytes: a pool whose entries shrink is filling up), and (3) it
has grown by more than ``fill_allowance`` objects (128: ``functools.lru_cache``'s default size,
twice the 60-70 entries of the caches and pools of the leak corpus; the leak check lowers it for
kinds whose holder it knows, see ``trainguard.leaks._evidence.holder_allowance``) during the run. A count that rose
and then stayed flat for at least as many readings as it rose is a plateau. The leak check also
asks that memory itself grows significantly at the same look and that the kind's bytes, when it
has any, explain at least a quarter of that growth (see ``trainguard.leaks._evidence``).

Allocator evidence (:func:`allocator_trend`): the C allocator's count of bytes in use
(``trainguard.probes.allocator``) is exact as counts are: a buffer freed again leaves it where it
was, one kept per call raises it by the same amount every call. It is read through the same rank
test (strictly rising at every reading, ``1/m!``), with a fill allowance in bytes
(:data:`ALLOCATOR_FILL_ALLOWANCE_BYTES`, 1 MiB: a native pool or cache may take that much before a
steady rise counts) and almost no slowdown (5 %, against 20 % for counts): a kept buffer adds the
same bytes every call, while a warm-up pool's increments shrink (the corpus's
``warmup_allocator_pool``: 2 MiB a call falling by 1.4 % a call, 11 % over its first 16 calls).
The first half's rate is the median of its readings' rises per call (the recent half's is its
total, so a cache that is full still reads as slowing at once), and the rate is the run's median
rise: a framework's first call builds, once, what it then keeps (TF's kernels for the step's other
ops, TorchScript's frontend), and that one reading must neither read as a slowdown nor fill the
allowance. The rise
must also reach the tolerance per call. The leak check then asks RSS to agree at the
check's own level, as it does for counts (``trainguard.leaks._native``).

Bytes in use trial over trial (:func:`trial_bytes_trend`): the runner's worker reads the same count
after each trial (after its cleanup and a ``gc.collect()``); ``trainguard show`` says whether it
rose, by :func:`robust_slope` over those few readings: a rise when its 95 % interval is above
zero and the slope reaches :data:`TRIAL_RISE_BYTES` a trial, flat when the interval's top is below it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from trainguard._slope import (
    ArrayLike,
    SlopeEstimate,
    _as_xy,
    least_squares_slope,
    noise_scale,
    robust_slope,
    theil_sen,
)
from trainguard.exceptions import ConfigError

__all__ = [
    "Verdict",
    "SlopeEstimate",
    "PlateauResult",
    "Decision",
    "theil_sen",
    "robust_slope",
    "least_squares_slope",
    "noise_scale",
    "detect_warmup",
    "detect_steps",
    "plateau_test",
    "look_schedule",
    "alpha_per_look",
    "decide",
    "CountTrend",
    "count_trend",
    "flat_since",
    "rss_allows_flat",
    "FLAT_RSS_CAP",
    "allocator_trend",
    "ALLOCATOR_FILL_ALLOWANCE_BYTES",
    "TrialBytesTrend",
    "trial_bytes_trend",
    "TRIAL_RISE_BYTES",
]


class Verdict(str, enum.Enum):
    """The answer of a leak check."""

    LEAK = "leak"
    NO_LEAK = "no_leak"
    PLATEAU = "plateau"
    INCONCLUSIVE = "inconclusive"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class PlateauResult:
    """Did the series grow during its warm-up and then stop?

    Attributes:
        is_plateau: True when the warm-up grew clearly and the rate after it is small.
        warmup_index: index where the settled part starts.
        growth_before: level increase from the start to the settled level (units of ``y``).
        slope_before: average rate during the warm-up (units per ``x``).
        slope_after: robust slope of the settled part.
    """

    is_plateau: bool
    warmup_index: int
    growth_before: float
    slope_before: float
    slope_after: SlopeEstimate | None


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one look at a series.

    ``verdict`` is None when the look cannot decide yet (keep iterating); at the final look it is
    always set. ``reason`` says why in words.
    """

    verdict: Verdict | None
    reason: str
    warmup_index: int
    slope: SlopeEstimate | None
    recent_slope: SlopeEstimate | None
    step_indices: tuple[int, ...]
    noise_bytes: float
    alpha: float


def detect_warmup(y: ArrayLike, x: ArrayLike | None = None, *, max_fraction: float = 0.5) -> int:
    """Index where the series settles onto its long-run behaviour (0 when it starts settled).

    MSER (White 1997): choose the cut ``d`` that minimises ``sum((r[d:] - mean(r[d:]))**2) / (n-d)**2``,
    where ``r`` are the residuals from a Theil-Sen line through the second half of the series, so
    that a steady trend counts as settled. The cut never passes ``max_fraction`` of the series.

    Args:
        y: the series.
        x: where each value was read (default ``0..n-1``).
        max_fraction: the largest share of the series that may be cut, in (0, 1).

    Returns:
        The index of the first settled value.
    """
    if not 0 < max_fraction < 1:
        raise ConfigError(f"max_fraction={max_fraction!r} must be between 0 and 1, e.g. 0.5")
    xa, ya = _as_xy(y, x)
    n = ya.size
    if n < 6:
        return 0
    half = n // 2
    b = theil_sen(ya[half:], xa[half:])
    r = ya - b * xa
    max_cut = int(math.floor(max_fraction * n))
    best_d, best_val = 0, math.inf
    # suffix sums give every candidate's statistic in one pass
    rs = r[::-1]
    csum = np.cumsum(rs)[::-1]
    csq = np.cumsum(rs * rs)[::-1]
    for d in range(0, max_cut + 1):
        k = n - d
        mean = csum[d] / k
        sse = csq[d] - k * mean * mean
        val = max(sse, 0.0) / (k * k)
        if val < best_val * (1 - 1e-9):
            best_d, best_val = d, val
    if best_d == 0:
        return 0
    # MSER cuts somewhere even in pure noise; keep the cut only when the part it drops really
    # sits off the settled level (by 6 standard errors and 1.5 standard deviations), which also keeps the test that
    # follows from choosing a window that merely looks more trending.
    kept = r[best_d:]
    scale = 1.4826 * float(np.median(np.abs(kept - np.median(kept))))
    if scale == 0:
        scale = float(np.std(kept))
    gap = abs(float(np.mean(r[:best_d]) - np.median(kept)))
    if best_d > 1 and (gap <= 6.0 * scale / math.sqrt(best_d) or gap <= 1.5 * scale):
        return 0
    if best_d == 1 and gap <= 4.0 * max(scale, 1e-12):
        return 0
    return int(best_d)


def detect_steps(y: ArrayLike, *, threshold: float = 6.0, min_jump: float = 0.0) -> tuple[int, ...]:
    """Indices ``i`` where ``y[i] - y[i-1]`` is a jump far outside the usual change.

    A jump is more than ``threshold`` robust standard deviations (1.4826 x MAD) of the first
    differences away from their median, and at least ``min_jump`` in absolute size.

    Args:
        y: the series.
        threshold: how many robust standard deviations make a jump.
        min_jump: the smallest absolute jump reported (e.g. a page or a tolerance).

    Returns:
        Indices into ``y`` of the values just after each jump, in order.
    """
    _, ya = _as_xy(y, None)
    if ya.size < 5:
        return ()
    d = np.diff(ya)
    med = float(np.median(d))
    scale = 1.4826 * float(np.median(np.abs(d - med)))
    dev = np.abs(d - med)
    limit = max(threshold * scale, min_jump)
    if limit <= 0:
        limit = np.finfo(float).tiny
    return tuple(int(i) + 1 for i in np.nonzero(dev > limit)[0])


def _remove_jumps(ya: np.ndarray, steps: Sequence[int]) -> np.ndarray:
    """The series with each listed jump (less the typical change) subtracted from what follows."""
    if not steps:
        return ya
    d = np.diff(ya)
    med = float(np.median(d))
    adj = ya.copy()
    for i in steps:
        adj[i:] -= d[i - 1] - med
    return np.asarray(adj, dtype=float)


def plateau_test(
    y: ArrayLike,
    x: ArrayLike | None = None,
    *,
    warmup_index: int | None = None,
    tolerance: float = 0.0,
    ratio: float = 0.25,
    confidence: float = 0.95,
    min_growth: float = 0.0,
    long_run: bool = True,
) -> PlateauResult:
    """Growth that stops is not a leak: did ``y`` grow during its warm-up and then level off?

    A plateau needs (1) a warm-up of at least 3 points whose level rose by more than three noise
    standard deviations, (2) a settled part at least as long as the warm-up (and 8 points), and
    (3) a settled slope that is not significantly positive and whose upper bound is below
    ``max(tolerance, ratio * slope_before)``.

    Args:
        y: the series.
        x: where each value was read (default ``0..n-1``).
        warmup_index: where the settled part starts (default :func:`detect_warmup`).
        tolerance: a slope below this is no growth at all (units per x).
        ratio: how much slower than during the warm-up the settled growth must be.
        confidence: the confidence level of the settled slope's interval.
        min_growth: the warm-up must have grown at least this much (units of ``y``).
        long_run: passed to :func:`robust_slope`.

    Returns:
        A :class:`PlateauResult`.
    """
    xa, ya = _as_xy(y, x)
    n = ya.size
    d = detect_warmup(ya, xa) if warmup_index is None else int(warmup_index)
    if n < 8 or d < 3 or n - d < max(8, d):
        return PlateauResult(False, d, 0.0, 0.0, None)
    after = robust_slope(ya[d:], xa[d:], confidence=confidence, long_run=long_run)
    k = max(2, min(5, d // 2))
    # skip the first reading: the first call of anything allocates caches, which is not growth
    start_level = float(np.median(ya[1 : 1 + k]))
    settled_level = float(np.median(ya[d : d + max(k, 3)]))
    growth = settled_level - start_level
    span = float(xa[d] - xa[1]) or 1.0
    slope_before = growth / span
    noise = noise_scale(ya[d:], xa[d:])
    grew = growth > max(3.0 * noise, tolerance * span, min_growth, 0.0) and slope_before > 0
    stopped = after.p_increase > (1 - confidence) and after.ci_high < max(tolerance, ratio * slope_before)
    return PlateauResult(bool(grew and stopped), d, growth, slope_before, after)


def look_schedule(min_points: int, max_points: int, *, ratio: float = 1.25) -> tuple[int, ...]:
    """Geometrically spaced sample counts at which a sequential test looks at the data.

    Args:
        min_points: the first look (>= 4).
        max_points: the last planned look (>= min_points).
        ratio: growth factor between looks (> 1).

    Returns:
        Increasing sample counts from ``min_points`` to ``max_points`` inclusive.
    """
    if min_points < 4:
        raise ConfigError(f"min_points={min_points!r} must be at least 4")
    if max_points < min_points:
        raise ConfigError(f"max_points={max_points!r} must be at least min_points={min_points}")
    if ratio <= 1:
        raise ConfigError(f"ratio={ratio!r} must be above 1, e.g. 1.25")
    looks = [min_points]
    while looks[-1] < max_points:
        looks.append(min(max_points, max(looks[-1] + 1, int(math.ceil(looks[-1] * ratio)))))
    return tuple(looks)


def alpha_per_look(alpha: float, looks: int) -> float:
    """The false-positive level of each look so that all ``looks`` together stay within ``alpha``.

    Bonferroni with a factor 2 held back: ``alpha / (2 * looks)``. The warm-up cut is chosen from
    the same data the test then reads, which on its own roughly doubled the false-positive rate
    in bench/leak_detection.py; the factor pays for it.
    """
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha={alpha!r} must be between 0 and 1, e.g. 0.01")
    if looks < 1:
        raise ConfigError(f"looks={looks!r} must be at least 1")
    return alpha / (2.0 * looks)


def _fmt(value: float, unit: str) -> str:
    if unit == "B":
        from trainguard.units import format_bytes

        return format_bytes(value, signed=True)
    return f"{value:+.3g}{unit}"


def _check_level(alpha: float, tolerance: float) -> None:
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha={alpha!r} must be between 0 and 1")
    if tolerance < 0:
        raise ConfigError(f"tolerance={tolerance!r} must be >= 0")


def decide(
    y: ArrayLike,
    x: ArrayLike | None = None,
    *,
    alpha: float,
    tolerance: float,
    final: bool = False,
    min_points: int = 12,
    confidence: float = 0.95,
    unit: str = "B",
    strong: bool = False,
    long_run: bool = True,
) -> Decision:
    """One look of the sequential leak decision.

    Args:
        y: the series so far (bytes after each measurement).
        x: iteration count at each measurement (default ``0..n-1``); slopes are per unit of x.
        alpha: this look's one-sided false-positive level (see :func:`alpha_per_look`).
        tolerance: the smallest slope (bytes per iteration) that counts as a leak; a series whose
            upper bound is below it is ``no_leak``.
        final: the budget is spent: return a verdict whatever the evidence.
        min_points: settled points needed before any verdict but the final one.
        confidence: level of the reported interval, which also decides ``no_leak`` (upper bound
            below ``tolerance``) and ``plateau``. The leak decision uses ``alpha`` alone.
        unit: ``"B"`` formats numbers as bytes in the reason; anything else is appended as is.
        strong: ask more of a leak: the last third of the settled window must grow significantly
            (p < 1 %) on its own, at least half as fast as the whole window. Used when too few
            iterations fit in the budget to wait out a warm-up of 50-80 iterations: a ramp that is
            about to level off slows down at its end, a leak does not.
        long_run: passed to every :func:`robust_slope` of the look (False: the lag-1 rule alone,
            for a look that only confirms other evidence).

    Returns:
        A :class:`Decision`; ``verdict`` is None when more iterations are needed.
    """
    _check_level(alpha, tolerance)
    xa, ya = _as_xy(y, x)
    n = ya.size
    if n < 4:
        verdict = Verdict.INCONCLUSIVE if final else None
        return Decision(
            verdict, f"only {n} measurements: at least 4 are needed", 0, None, None, (), 0.0, alpha
        )
    warm = detect_warmup(ya, xa)
    wx, wy = xa[warm:], ya[warm:]
    m = wy.size
    est = robust_slope(wy, wx, confidence=confidence, long_run=long_run)
    strict = robust_slope(wy, wx, confidence=1.0 - 2.0 * alpha, long_run=long_run)
    noise = noise_scale(wy, wx)
    half = m // 2
    recent = (
        robust_slope(wy[half:], wx[half:], confidence=confidence, long_run=long_run)
        if m - half >= 4
        else None
    )
    step_idx = detect_steps(wy, min_jump=max(tolerance * 2, 1.0) if unit == "B" else 0.0)
    rate = f"{_fmt(est.slope, unit)}/iter (CI {_fmt(est.ci_low, unit)} .. {_fmt(est.ci_high, unit)})"

    def out(verdict: Verdict | None, reason: str) -> Decision:
        return Decision(verdict, reason, warm, est, recent, tuple(i + warm for i in step_idx), noise, alpha)

    if m < min_points and not final:
        return out(None, f"{m} settled measurements; waiting for {min_points}")

    significant = est.p_increase < alpha and est.slope >= tolerance
    if significant:
        problems = _leak_problems(
            wy, wx, est, recent, step_idx, tolerance, alpha, confidence, strong, unit, long_run
        )
        if not problems:
            return out(
                Verdict.LEAK, f"memory grows {rate}, steadily after {int(xa[warm])} warm-up iterations"
            )
        if not final:
            return out(None, "; ".join(problems) + "; collecting more iterations")
        plateau = plateau_test(ya, xa, tolerance=tolerance, confidence=confidence, long_run=long_run)
        stopped = recent is not None and not (recent.p_increase < alpha and recent.ci_low > 0)
        if (
            stopped
            and recent is not None
            and (plateau.is_plateau or recent.ci_high < max(tolerance, est.slope / 2))
        ):
            return out(
                Verdict.PLATEAU,
                f"memory grew {rate} but {problems[0]}, and the last {recent.n} measurements show no "
                f"significant growth ({_fmt(recent.slope, unit)}/iter)",
            )
        return out(Verdict.INCONCLUSIVE, f"memory grew {rate} but {'; '.join(problems)}; run more iterations")
    verdict, reason = _without_significant_growth(
        ya, xa, warm, est, strict, noise, tolerance, confidence, final, m >= min_points, rate, unit, long_run
    )
    return out(verdict, reason)


def _leak_problems(
    wy: np.ndarray,
    wx: np.ndarray,
    est: SlopeEstimate,
    recent: SlopeEstimate | None,
    step_idx: tuple[int, ...],
    tolerance: float,
    alpha: float,
    confidence: float,
    strong: bool,
    unit: str,
    long_run: bool = True,
) -> list[str]:
    """Why significant growth is not (yet) a leak: it slows down, the recent third does not grow
    on its own (``strong``), or most of it came in one or two jumps. Empty when it is a leak."""
    fmt = _fmt
    problems: list[str] = []
    m = wy.size
    half = m // 2
    if recent is not None:
        first = robust_slope(wy[: half + 1], wx[: half + 1], confidence=confidence, long_run=long_run)
        se = math.hypot(first.stderr, recent.stderr)
        z_slow = (first.slope - recent.slope) / se if se > 0 and math.isfinite(se) else 0.0
        # growth must show in both halves: a level shift (the allocator switching to a
        # bigger heap for a while) lifts the whole series but leaves one half flat
        # (with a relative drop too: on an almost noiseless series a 1 % difference is "significant")
        slowing = (z_slow > 1.645 and recent.slope < 0.8 * first.slope) or (
            z_slow > 1.0 and recent.slope < 0.5 * first.slope
        )
        if slowing or recent.slope < tolerance or recent.p_increase > 0.25 or first.slope <= 0:
            problems.append(
                f"growth is slowing down ({fmt(first.slope, unit)}/iter, then {fmt(recent.slope, unit)}/iter)"
            )
    if strong and m >= 9:
        tail_start = m - max(m // 3, 4)
        tail = robust_slope(wy[tail_start:], wx[tail_start:], confidence=confidence, long_run=long_run)
        if not (tail.p_increase < 0.01 and tail.slope >= max(tolerance, 0.5 * est.slope)):
            problems.append(
                f"the last {tail.n} measurements do not show the same growth on their own "
                f"({fmt(tail.slope, unit)}/iter)"
            )
    up_steps = [i for i in step_idx if wy[i] > wy[i - 1]]
    if step_idx and len(up_steps) <= 2:
        adjusted = _remove_jumps(wy, step_idx)
        adj = robust_slope(adjusted, wx, confidence=confidence, long_run=long_run)
        if not (adj.p_increase < alpha and adj.slope >= tolerance):
            where = ", ".join(str(int(wx[i])) for i in up_steps) or "-"
            problems.append(f"most growth came in {len(step_idx)} jump(s) (at iteration {where})")
    return problems


def _without_significant_growth(
    ya: np.ndarray,
    xa: np.ndarray,
    warm: int,
    est: SlopeEstimate,
    strict: SlopeEstimate,
    noise: float,
    tolerance: float,
    confidence: float,
    final: bool,
    enough: bool,
    rate: str,
    unit: str,
    long_run: bool = True,
) -> tuple[Verdict | None, str]:
    """The verdict when growth is not significant: plateau, no_leak, wait, or inconclusive."""
    fmt = _fmt
    # a few MB of first-iteration caches is ordinary; a plateau is growth worth mentioning
    min_growth = 4.0 * 1024 * 1024 if unit == "B" else 0.0
    plateau = plateau_test(
        ya,
        xa,
        warmup_index=warm,
        tolerance=tolerance,
        confidence=confidence,
        min_growth=min_growth,
        long_run=long_run,
    )
    if plateau.is_plateau and (final or enough):
        return Verdict.PLATEAU, (
            f"memory grew {fmt(plateau.growth_before, unit)} over the first {int(xa[warm])} iterations, "
            f"then leveled off: {rate}"
        )
    if strict.ci_high < tolerance:
        if est.ci_low > 0:
            # significant but slower than the tolerance: say so rather than "no growth", so a user
            # who cares about slow growth (a long-running service) knows to lower the tolerance
            return Verdict.NO_LEAK, (
                f"slow growth {rate}, below the tolerance {fmt(tolerance, unit)}/iter: not counted as a "
                "leak (lower --tolerance to count it)"
            )
        return Verdict.NO_LEAK, f"no growth: {rate}, below the tolerance {fmt(tolerance, unit)}/iter"
    if not final:
        return None, (
            f"no significant growth yet ({rate}); a leak up to {fmt(est.ci_high, unit)}/iter is not ruled out"
        )
    return Verdict.INCONCLUSIVE, (
        f"no significant growth ({rate}), but the noise ({fmt(noise, unit)}) leaves a leak of up to "
        f"{fmt(est.ci_high, unit)}/iter possible; run more iterations or raise the tolerance"
    )


@dataclass(frozen=True, slots=True)
class CountTrend:
    """What an exact count series says (see "Count evidence" in the module docstring).

    Attributes:
        status: ``"grows"`` (supports a leak), ``"filling"`` (rises steadily but has not yet passed
            the fill allowance or the minimum span), ``"slowing"`` (rises, more and more slowly),
            ``"plateau"`` (rose, then stayed flat), ``"flat"`` or ``"irregular"``.
        count_per_iter: growth per call over the rising run (0 when there is none).
        bytes_per_iter: the same for the kind's bytes (0 when it has none).
        run_readings: readings in the final strictly rising run.
        run_calls: calls that run spans.
        grown: objects added over that run.
        p_value: ``1 / run_readings!``, the chance of such a run without a trend.
    """

    status: str
    count_per_iter: float
    bytes_per_iter: float
    run_readings: int
    run_calls: int
    grown: int
    p_value: float


def _rising_run(c: np.ndarray) -> int:
    """Index where the final strictly rising run of ``c`` starts."""
    i = c.size - 1
    while i > 0 and c[i] > c[i - 1]:
        i -= 1
    return i


def _not_slowing(v: np.ndarray, x: np.ndarray, max_slowdown: float) -> bool:
    """The second half of the run grows at least (1 - max_slowdown) times as fast as the first."""
    half = v.size // 2
    first = (v[half] - v[0]) / max(x[half] - x[0], 1e-12)
    recent = (v[-1] - v[half]) / max(x[-1] - x[half], 1e-12)
    return bool(first > 0 and recent >= (1.0 - max_slowdown) * first)


def count_trend(
    counts: ArrayLike,
    x: ArrayLike | None = None,
    nbytes: ArrayLike | None = None,
    *,
    alpha: float,
    min_calls: int = 15,
    min_readings: int = 6,
    fill_allowance: int = 128,
    max_slowdown: float = 0.2,
    bytes_max_slowdown: float | None = None,
) -> CountTrend:
    """Does an exact count of live objects grow like a leak? See "Count evidence" above.

    Args:
        counts: the kind's count at each reading.
        x: calls made at each reading (default ``0..n-1``).
        nbytes: the bytes the kind held at each reading, if known.
        alpha: the false-positive level of this test (this look's, split over the kinds tested).
        min_calls: the rising run must span at least this many calls.
        min_readings: and at least this many readings.
        fill_allowance: a bounded cache or pool can hold this many objects; growth must pass it.
        max_slowdown: how much slower the recent half of the run may grow.
        bytes_max_slowdown: the same for the bytes, when they are exact and must not slow down at
            all (0.0: entries of an append-only list, see ``trainguard.leaks._evidence``); default
            ``max_slowdown``.

    Returns:
        A :class:`CountTrend`.

    Raises:
        ConfigError: a bad level, NaN values, or series of different lengths.
    """
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha={alpha!r} must be between 0 and 1, e.g. 0.001")
    xa, ca = _as_xy(counts, x)
    ba = _as_xy(nbytes, xa)[1] if nbytes is not None else np.zeros_like(ca)
    if ca.size < 3:
        status = "filling" if ca.size == 2 and ca[1] > ca[0] else "flat"
        span = float(xa[-1] - xa[0]) if ca.size == 2 else 0.0
        rate = float(ca[-1] - ca[0]) / span if span > 0 else 0.0
        byte_rate = float(ba[-1] - ba[0]) / span if span > 0 else 0.0
        return CountTrend(status, rate, byte_rate, int(ca.size), int(span), int(ca[-1] - ca[0]), 1.0)
    start = _rising_run(ca)
    m = ca.size - start
    if m < 2:
        return _count_not_rising(ca, xa)
    span = float(xa[-1] - xa[start])
    grown = int(ca[-1] - ca[start])
    rate = grown / max(span, 1e-12)
    byte_rate = float(ba[-1] - ba[start]) / max(span, 1e-12)
    p_value = math.exp(-math.lgamma(m + 1))
    cx, cc, cb = xa[start:], ca[start:], ba[start:]
    byte_slack = max_slowdown if bytes_max_slowdown is None else bytes_max_slowdown
    steady = m < 4 or (
        _not_slowing(cc, cx, max_slowdown) and (cb[-1] <= cb[0] or _not_slowing(cb, cx, byte_slack))
    )
    if not steady:
        status = "slowing"
    elif p_value <= alpha and span >= min_calls and m >= min_readings and grown > fill_allowance:
        status = "grows"
    else:
        status = "filling"
    return CountTrend(status, rate, byte_rate, int(m), int(span), grown, p_value)


def _count_not_rising(ca: np.ndarray, xa: np.ndarray) -> CountTrend:
    """The last reading did not rise: a plateau when an earlier rise was followed by at least as
    many flat readings, otherwise flat or irregular."""
    top = int(np.argmax(ca))
    flat_after = bool(np.all(ca[top:] == ca[top]))
    rise = int(np.argmin(ca[: top + 1])) if top > 0 else 0
    if flat_after and top > rise and ca.size - top >= max(3, top - rise):
        return CountTrend("plateau", 0.0, 0.0, 1, 0, int(ca[top] - ca[rise]), 1.0)
    status = "flat" if np.ptp(ca) == 0 else "irregular"
    return CountTrend(status, 0.0, 0.0, 1, 0, 0, 1.0)


def flat_since(counts: ArrayLike) -> int:
    """Index from which an exact count never rises above its value there: the start of the final
    run over which the kind grew by exactly 0 a call (it may fall within the run, never rise past
    where it started). A leaking kind is higher at every reading than at any before, so its run is
    its last reading alone; a warm-up that stops (a first fit's caches) starts its run where it
    stopped. The mirror of :func:`count_trend`'s rising run, for ``no_leak``.

    Raises:
        ConfigError: no counts, or NaN values.
    """
    _, ca = _as_xy(counts, None)
    if ca.size == 0:
        raise ConfigError("flat_since needs at least one count, e.g. [5, 5, 5]")
    # the highest count at or after each reading, from the right: a run may start at i when no
    # later reading is above c[i]
    later_max = np.maximum.accumulate(ca[::-1])[::-1]
    ok = np.append(ca[:-1] >= later_max[1:], True)
    return int(np.argmax(ok))


#: How wide RSS's 95 % interval may be, each side, in tolerances, for exact evidence to support
#: ``no_leak`` (see :func:`rss_allows_flat`; the choice is measured in BENCHMARKS.md,
#: ``bench/flat_evidence_rates.py``).
FLAT_RSS_CAP = 2.0


def rss_allows_flat(est: SlopeEstimate, *, alpha: float, tolerance: float, cap: float | None = None) -> bool:
    """Whether RSS's own slope leaves room for a ``no_leak`` that exact evidence supports (counts
    exactly flat, bytes in use flat). Memory outside both malloc and Python objects (an ``mmap``
    kept a call, pymalloc arenas of uncounted builtins, a native thread's stack) shows in RSS
    alone, so RSS must agree: no significant growth at the look's level ``alpha``, the point
    slope under ``tolerance``, and the interval precise enough to see growth of ``cap`` tolerances
    (its 95 % half-width under ``cap`` times the tolerance; default :data:`FLAT_RSS_CAP`). Then RSS
    growth of ``1 + cap`` tolerances or more reads over the tolerance at a look with at most about
    2.5 % chance. The point slope alone would pass a noisy series half the time whatever it
    hides (a Keras fit on the torch backend swings RSS by 70 MB: over 20 readings its interval is
    +-2.6 MB a call, and a 1 MB/call leak there reads under a 90 KB tolerance about a quarter of
    the time); with the half-width asked for, a step that noisy waits for RSS's own interval as
    before."""
    limit = (FLAT_RSS_CAP if cap is None else cap) * tolerance
    precise = est.ci_high - est.slope < limit
    return bool(est.p_increase >= alpha and est.slope < tolerance and precise)


#: Bytes in use a native pool or cache may take before a steady rise supports a leak.
ALLOCATOR_FILL_ALLOWANCE_BYTES = 1024 * 1024
#: How much slower the recent half of a rise of bytes in use may grow (see the module docstring).
ALLOCATOR_MAX_SLOWDOWN = 0.05


def allocator_trend(
    in_use: ArrayLike,
    x: ArrayLike | None = None,
    *,
    alpha: float,
    tolerance: float,
    fill_allowance: float = ALLOCATOR_FILL_ALLOWANCE_BYTES,
    min_calls: int = 15,
    min_readings: int = 6,
) -> CountTrend:
    """Does the allocator's count of bytes in use grow like a leak? :func:`count_trend` over bytes
    (``count_per_iter`` is then bytes per call), with :data:`ALLOCATOR_MAX_SLOWDOWN` and a status
    ``"slow"`` for a steady rise below ``tolerance`` bytes per call.

    Raises:
        ConfigError: a bad level or tolerance, NaN values, or series of different lengths.
    """
    _check_level(alpha, tolerance)
    trend = count_trend(
        in_use,
        x,
        alpha=alpha,
        min_calls=min_calls,
        min_readings=min_readings,
        fill_allowance=int(fill_allowance),
        max_slowdown=ALLOCATOR_MAX_SLOWDOWN,
    )
    if trend.status in ("grows", "filling", "slowing") and trend.run_readings >= 4:
        xa, ya = _as_xy(in_use, x)
        steady = _steady_rise(xa[-trend.run_readings :], ya[-trend.run_readings :], ALLOCATOR_MAX_SLOWDOWN)
        if steady is None:
            trend = replace(trend, status="slowing")
        else:
            p_ok = trend.p_value <= alpha and trend.run_calls >= min_calls
            passed = p_ok and trend.run_readings >= min_readings and steady * trend.run_calls > fill_allowance
            trend = replace(trend, status="grows" if passed else "filling", count_per_iter=steady)
    if trend.status == "grows" and trend.count_per_iter < tolerance:
        return replace(trend, status="slow")
    return trend


def _steady_rise(x: np.ndarray, v: np.ndarray, max_slowdown: float) -> float | None:
    """The rise per call of a strictly rising run of bytes in use (the median of its readings'
    rises per call), or None when it slows: the recent half's rise per call more than
    ``max_slowdown`` below the first half's, read without its first rise.

    The first half without its first rise: a framework's first calls build, once, what it then keeps (the
    corpus's ``tf_random_op_seed``: +44 KiB of kernels on the first call against 35 KiB a call
    after; ``torch_jit_script_in_step``: +3.2 MiB of TorchScript's frontend, then 100 KiB a call),
    and with the half's total that one reading read as slowing for 68 calls (TF) or past the
    120-call wait (torch). The recent half by its total, as before: a cache that is full shows as
    its last few readings rising by almost nothing (``lru_cache_64``: 496 B a call once its 64
    entries are in, still a strict rise), which a median would pass over."""
    per = np.diff(v) / np.maximum(np.diff(x), 1e-12)
    half = per.size // 2
    # the first half's total without its first rise (the one-time cost); a median instead read a
    # jemalloc count, which rises in uneven steps (its thread caches), as slowing
    first = float((v[half] - v[1]) / max(x[half] - x[1], 1e-12)) if half >= 2 else float(per[0])
    recent = float((v[-1] - v[half]) / max(x[-1] - x[half], 1e-12))
    if not (first > 0 and recent >= (1.0 - max_slowdown) * first):
        return None
    return float(np.median(per))


#: The rise of bytes in use per trial from which ``show`` says a worker's native memory grows.
TRIAL_RISE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class TrialBytesTrend:
    """Did a worker's C allocator bytes in use rise trial over trial?

    Attributes:
        status: ``"rises"`` (the 95 % interval of the slope is above zero and the slope reaches
            ``min_rise_bytes`` a trial), ``"slight"`` (above zero, below that), ``"flat"`` (the
            interval's top is below ``min_rise_bytes``), ``"unclear"`` (too noisy to say) or
            ``"too_few"`` (fewer than 3 readings).
        per_trial_bytes: the Theil-Sen slope, bytes per trial.
        ci_low: the interval's lower end (bytes per trial; ``-inf`` under 3 readings).
        ci_high: its upper end.
        first_bytes: the first reading.
        last_bytes: the last reading.
        n: the number of readings.
        settled_from: the first reading the slope is read from (:func:`detect_warmup`: the
            worker's first trials may load modules and fill caches), at most ``n - 3``.
    """

    status: str
    per_trial_bytes: float
    ci_low: float
    ci_high: float
    first_bytes: int
    last_bytes: int
    n: int
    settled_from: int = 0


def trial_bytes_trend(
    in_use: Sequence[int], *, min_rise_bytes: float = TRIAL_RISE_BYTES, confidence: float = 0.95
) -> TrialBytesTrend:
    """The trend of one worker's bytes in use after each of its trials, in the order they ran.

    Raises:
        ConfigError: no readings, a negative or NaN one, ``min_rise_bytes`` <= 0, or a bad ``confidence``.
    """
    if len(in_use) == 0:
        raise ConfigError("trial_bytes_trend needs the bytes in use after at least one trial, e.g. [4194304]")
    if not min_rise_bytes > 0:
        raise ConfigError(f"min_rise_bytes={min_rise_bytes!r} must be > 0 bytes per trial, e.g. 262144")
    values = [float(v) for v in in_use]
    if any(not v >= 0 for v in values):
        raise ConfigError(f"bytes in use must be numbers >= 0, not {list(in_use)!r}")
    first, last, n = int(values[0]), int(values[-1]), len(values)
    if n < 3:
        slope = values[-1] - values[0] if n == 2 else 0.0
        return TrialBytesTrend("too_few", slope, -math.inf, math.inf, first, last, n, 0)
    # a worker's first trials warm it (imports, first-call caches): the trend is read where the
    # series settles, over 3 readings at least
    settled = min(detect_warmup(values), n - 3)
    est = robust_slope(values[settled:], confidence=confidence)
    if est.ci_low > 0:
        status = "rises" if est.slope >= min_rise_bytes else "slight"
    elif est.ci_high < min_rise_bytes:
        status = "flat"
    else:
        status = "unclear"
    return TrialBytesTrend(status, est.slope, est.ci_low, est.ci_high, first, last, n, settled)
