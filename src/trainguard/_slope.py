"""The robust slope of a series: Theil-Sen with a robust, autocorrelation-corrected confidence
interval and trend test.

Pure functions over a sequence of floats, below every package that reads a growth: the leak check
(:mod:`trainguard.leaks.stats`, which re-exports these names and whose docstring explains the
estimator), the run report's growth per worker, ``compare`` and the Keras callback. Kept here, not
in ``leaks/``, so that the report reads the slope without importing the leak check (which hands
its reports to the report package).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Student's t through scipy.special's functions (stdtr, the CDF; stdtrit, its inverse): the values of
# scipy.stats.t.sf and .ppf to 1e-12, at 3 us a call where those take 180 us (the leak check computes
# slopes at every look), and without importing scipy.stats (1.5 CPU s in every leak-check process).
from scipy.special import stdtr as _t_cdf
from scipy.special import stdtrit as _t_quantile

from trainguard.exceptions import ConfigError

__all__ = [
    "evenly_sampled",
    "ArrayLike",
    "SlopeEstimate",
    "theil_sen",
    "least_squares_slope",
    "noise_scale",
    "robust_slope",
]

ArrayLike = Sequence[float] | np.ndarray


@dataclass(frozen=True, slots=True)
class SlopeEstimate:
    """A robust slope with its confidence interval and trend test.

    Attributes:
        slope: Theil-Sen slope, units of ``y`` per unit of ``x`` (bytes per iteration).
        ci_low: lower end of the two-sided ``confidence`` interval: Student's t on the robust,
            autocorrelation-corrected standard error (not Sen's rank interval, whose pairs
            assume independent noise).
        ci_high: upper end of that interval.
        n: number of points used.
        z: t statistic of the slope (robust scale, corrected for autocorrelation); > 0 means growth.
        p_increase: one-sided p-value of "the series grows".
        confidence: the interval's confidence level.
        autocorrelation: the lag-1 autocorrelation used for the variance inflation (>= 0).
        variance_inflation: the factor applied to the slope variance for autocorrelation (>= 1).
        df: the degrees of freedom of the t test and the interval: ``n - 2``, or fewer when the
            variance comes from a long-run estimate (None on records made before it existed:
            ``n - 2``).
    """

    slope: float
    ci_low: float
    ci_high: float
    n: int
    z: float
    p_increase: float
    confidence: float
    autocorrelation: float = 0.0
    variance_inflation: float = 1.0
    df: float | None = None

    @property
    def stderr(self) -> float:
        """The standard error read back from the interval's width (for comparing two slopes)."""
        if self.n < 3 or not math.isfinite(self.ci_high - self.ci_low):
            return math.inf
        df = self.df if self.df is not None else self.n - 2
        q = float(_t_quantile(df, 0.5 + self.confidence / 2))
        return max((self.ci_high - self.ci_low) / (2 * q), 0.0)


def evenly_sampled(series: Sequence[int], limit: int) -> tuple[list[float], list[float]]:
    """At most ``limit`` points of ``series`` spread evenly over it, the first and the last
    included, as ``(positions, values)``."""
    n = len(series)
    if n <= limit:
        return [float(i) for i in range(n)], [float(v) for v in series]
    picks = sorted({round(k * (n - 1) / (limit - 1)) for k in range(limit)})
    return [float(i) for i in picks], [float(series[i]) for i in picks]


def _as_xy(y: ArrayLike, x: ArrayLike | None) -> tuple[np.ndarray, np.ndarray]:
    ya = np.asarray(y, dtype=float).ravel()
    if x is None:
        xa = np.arange(ya.size, dtype=float)
    else:
        xa = np.asarray(x, dtype=float).ravel()
        if xa.size != ya.size:
            raise ConfigError(f"x has {xa.size} values and y has {ya.size}: give one x per y")
    if not (np.all(np.isfinite(ya)) and np.all(np.isfinite(xa))):
        raise ConfigError("the series contains NaN or infinite values: drop them before the analysis")
    return xa, ya


def _pairwise(xa: np.ndarray, ya: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(xa.size, k=1)
    dx = xa[j] - xa[i]
    dy = ya[j] - ya[i]
    keep = dx != 0
    return dx[keep], dy[keep]


def theil_sen(y: ArrayLike, x: ArrayLike | None = None) -> float:
    """The Theil-Sen slope: the median of the slopes of all pairs of points.

    Args:
        y: the series.
        x: where each value was read (default ``0..n-1``); repeated x values are skipped in pairs.

    Returns:
        The slope in units of ``y`` per unit of ``x``; 0.0 with fewer than two distinct x values.
    """
    xa, ya = _as_xy(y, x)
    dx, dy = _pairwise(xa, ya)
    if dx.size == 0:
        return 0.0
    return float(np.median(dy / dx))


def least_squares_slope(y: ArrayLike, x: ArrayLike | None = None) -> float:
    """The ordinary least-squares slope (for comparison; not robust to spikes)."""
    xa, ya = _as_xy(y, x)
    if xa.size < 2 or np.ptp(xa) == 0:
        return 0.0
    return float(np.polyfit(xa, ya, 1)[0])


def noise_scale(y: ArrayLike, x: ArrayLike | None = None) -> float:
    """A robust standard deviation of the residuals from the Theil-Sen line (1.4826 x MAD)."""
    xa, ya = _as_xy(y, x)
    if ya.size < 3:
        return 0.0
    b = theil_sen(ya, xa)
    r = ya - b * xa
    r = r - np.median(r)
    return float(1.4826 * np.median(np.abs(r)))


def _winsorised(resid: np.ndarray, scale: float) -> np.ndarray:
    """``resid`` about its median, clipped at 3 scales (so a spike counts once), then centred."""
    r = resid - np.median(resid)
    if scale > 0:
        r = np.clip(r, -3 * scale, 3 * scale)
    return np.asarray(r - r.mean(), dtype=float)


def _lag1_autocorrelation(resid: np.ndarray, scale: float) -> float:
    """Lag-1 autocorrelation of ``resid`` (winsorised at 3 scales so a spike counts once),
    bias-corrected for short series and raised by one standard error, clipped to [0, 0.8]."""
    n = resid.size
    if n < 6:
        return 0.0
    r = _winsorised(resid, scale)
    denom = float(np.dot(r, r))
    if denom == 0:
        return 0.0
    rho = float(np.dot(r[:-1], r[1:]) / denom)
    # E[rho_hat] ~ rho - (1 + 3 rho) / n for AR(1) (Kendall 1954): undo that downward bias, and
    # use the upper end of a one-standard-error band: an underestimated correlation makes the
    # test call noise a leak, an overestimated one only costs a few iterations
    rho = (rho * n + 1.0) / (n - 3.0) + 1.0 / math.sqrt(n)
    return float(min(max(rho, 0.0), 0.8))


def _long_run_factor(resid: np.ndarray, scale: float) -> tuple[float, float]:
    """The Bartlett (Newey-West) long-run variance of ``resid`` over ``L = ceil(n ** (1/3))`` lags,
    as a factor of its variance (``1 + 2 sum_k (1 - k / (L + 1)) r_k``, winsorised like the lag-1
    estimate), and the equivalent degrees of freedom of that estimate, ``1.5 n / (L + 1)``.
    ``(1.0, n - 2)`` for fewer than 6 points."""
    n = resid.size
    if n < 6:
        return 1.0, float(n - 2)
    r = _winsorised(resid, scale)
    denom = float(np.dot(r, r))
    lags = int(math.ceil(n ** (1.0 / 3.0)))
    nu = 1.5 * n / (lags + 1)
    if denom == 0:
        return 1.0, nu
    # lags < n - 1 from 6 points on
    acc = sum((1.0 - k / (lags + 1)) * float(np.dot(r[:-k], r[k:])) for k in range(1, lags + 1))
    return 1.0 + 2.0 * acc / denom, nu


def robust_slope(
    y: ArrayLike,
    x: ArrayLike | None = None,
    *,
    confidence: float = 0.95,
    autocorrelation: bool = True,
    resolution: float = 0.0,
    long_run: bool = True,
) -> SlopeEstimate:
    """Theil-Sen slope with a robust standard error, a confidence interval and a trend test.

    The standard error is the least-squares formula with the noise scale taken robustly (the
    largest of 1.4826 x MAD of the residuals from the Theil-Sen line, their standard deviation
    winsorised at 3 MADs, half their plain standard deviation, and the measurement's resolution
    over sqrt(12): spikes do not widen it, a small n does not make it tiny), times 1.05 for
    Theil-Sen's efficiency, times the square root of the larger of ``(1 + rho) / (1 - rho)`` for
    the lag-1 autocorrelation ``rho`` of the residuals and their Bartlett long-run variance factor
    (see the module docstring). The test and the interval use Student's t with ``n - 2`` degrees of
    freedom, or the long-run estimate's equivalent degrees of freedom when fewer (``autocorrelation``
    on, from 6 points).

    Args:
        y: the series (e.g. bytes after each iteration).
        x: where each value was read (default ``0..n-1``), e.g. the iteration count.
        confidence: two-sided confidence level of the interval, in (0, 1).
        autocorrelation: correct for autocorrelated noise (recommended for memory series).
        resolution: the step of the measurement (e.g. 4096 for page-granular RSS); the noise scale
            is never taken below ``resolution / sqrt(12)``.
        long_run: with ``autocorrelation``, also bound the variance by the long-run estimate and
            use its degrees of freedom (the default). False keeps the lag-1 rule alone with
            ``n - 2`` degrees of freedom: for a test at a moderate level over few readings that
            only confirms other evidence (the leak check's confirmation of count evidence).

    Returns:
        A :class:`SlopeEstimate` (``z`` is the t statistic). With fewer than 3 points the
        interval is infinite and z is 0.

    Raises:
        ConfigError: ``confidence`` outside (0, 1), x and y of different lengths, or NaN values.
    """
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence={confidence!r} must be between 0 and 1, e.g. 0.95")
    xa, ya = _as_xy(y, x)
    n = int(ya.size)
    if n < 3 or np.ptp(xa) == 0:
        slope = theil_sen(ya, xa) if n == 2 else 0.0
        return SlopeEstimate(slope, -math.inf, math.inf, n, 0.0, 0.5, confidence)
    slope = theil_sen(ya, xa)
    resid = ya - slope * xa
    resid = resid - np.median(resid)
    mad_scale = 1.4826 * float(np.median(np.abs(resid)))
    # the MAD alone is a noisy scale at small n (37 % efficiency), which makes the t test call
    # chance trends significant; a standard deviation winsorised at 3 MADs is as robust to
    # spikes and far steadier
    wins = float(np.std(np.clip(resid, -3 * mad_scale, 3 * mad_scale))) if mad_scale > 0 else 0.0
    scale = max(mad_scale, wins, 0.5 * float(np.std(resid)), resolution / math.sqrt(12.0))
    rho = _lag1_autocorrelation(resid, scale) if autocorrelation else 0.0
    inflation = (1.0 + rho) / (1.0 - rho)
    df = float(n - 2)
    if autocorrelation and long_run:
        factor, nu = _long_run_factor(resid, scale)
        inflation = max(inflation, factor)
        df = min(df, nu)
    sxx = float(np.sum((xa - xa.mean()) ** 2))
    se = 1.05 * scale * math.sqrt(inflation / sxx)
    if se == 0:
        return SlopeEstimate(
            slope,
            slope,
            slope,
            n,
            0.0 if slope == 0 else math.copysign(math.inf, slope),
            0.5 if slope == 0 else float(slope < 0),
            confidence,
            rho,
            inflation,
            df,
        )
    t = slope / se
    p_increase = float(_t_cdf(df, -t))  # P(T > t)
    q = float(_t_quantile(df, 0.5 + confidence / 2))
    return SlopeEstimate(
        slope, slope - q * se, slope + q * se, n, float(t), p_increase, confidence, rho, inflation, df
    )
