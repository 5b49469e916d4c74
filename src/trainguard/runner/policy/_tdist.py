"""Student's t quantile and the one-column F test's p, in plain Python.

The peak model needs only these two numbers from a statistics library. Computing them here keeps
scipy (about 60 MiB of RSS) out of the process that fits the model, which is the user's own: an
Optuna study, a notebook kernel. Both come from the regularized incomplete beta function, by its
continued fraction (Lentz's method), to about 1e-12 relative accuracy.
"""

from __future__ import annotations

import functools
import math

__all__ = ["t_quantile", "f1_survival"]

_TINY = 1e-300
_EPS = 1e-14


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (converges for x < (a+1)/(a+b+2))."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, df: float) -> float:
    """P(T > t) for t >= 0, T Student's t with ``df`` degrees of freedom."""
    return 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def f1_survival(f: float, df: float) -> float:
    """P(F > f) for F with (1, ``df``) degrees of freedom (the partial F test of one column):
    F(1, df) is T(df) squared, so this is the two-sided tail of t = sqrt(f)."""
    if f <= 0.0:
        return 1.0
    return min(1.0, 2.0 * _t_upper_tail(math.sqrt(f), df))


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0 < p < 1).

    Cached: a peak model asks the same few ``(p, df)`` at every prediction (its level, its
    residual degrees of freedom), and the bisection costs about 1 ms of CPU each time."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p!r} must be between 0 and 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    tail = 1.0 - p
    if tail <= 0.0:
        return math.inf
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:  # the tail falls as t grows: bracket, then bisect
        low, high = high, high * 2.0
        if high > 1e12:
            return high
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _t_upper_tail(mid, df) > tail:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)
