"""The peak model's fit (numpy): see :mod:`trainguard.runner.policy._peaks` for the model and
the decisions taken on a prediction. Imported only when a model is fitted, so that importing the
runner costs no numpy. The t and F tails come from :mod:`._tdist`, so a fit imports no scipy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainguard.runner.policy._peaks import MIN_TRIALS, PeakPrediction, numeric_params
from trainguard.runner.policy._tdist import f1_survival, t_quantile

__all__ = ["PeakFit", "fit_peaks"]

#: the peaks' relative spread under which params that explain nothing still predict the level
FLAT_SPREAD = 0.05
#: a point more than this many robust scales off the first fit is left out of the second
OUTLIER_SCALES = 4.0
#: trials needed before any is left out as an outlier, and the smallest scale that counts as "far"
OUTLIER_MIN_TRIALS = 15
OUTLIER_MIN_SCALE = 0.05
#: the smallest relative scale of the log residuals: peaks are sampled, so never trust a fit tighter
MIN_SCALE = 0.01
_BASE_FRACTIONS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)
#: Gauss-Newton steps at most per fit (it converges in 3-6 on these shapes)
GN_STEPS = 20
#: a param enters the model when its partial F test gives p under this
ENTER_P = 0.001


@dataclass(frozen=True, slots=True)
class PeakFit:
    """A fitted peak model (see the module docstring); :meth:`predict` answers for new params."""

    features: tuple[str, ...]
    base_bytes: float
    coef: tuple[float, ...]  # intercept first, then one per feature (log-log exponents)
    scale: float  # residual standard deviation of log(peak)
    df: int
    xtx_inv: tuple[tuple[float, ...], ...]  # the linearised fit's (J^T J)^-1
    trials: int
    ignored: dict[str, str] = field(default_factory=dict)
    level: float = 0.95
    flat: bool = False  # no param kept: the prediction is the peaks' level

    def describe(self) -> str:
        if self.flat:
            return f"peak does not depend on the numeric params ({self.trials} trials)"
        terms = " x ".join(f"{name}^{b:.2f}" for name, b in zip(self.features, self.coef[1:], strict=True))
        base = f"{_mib(self.base_bytes)} + " if self.base_bytes > 0 else ""
        return f"peak ~ {base}k x {terms} ({self.trials} trials)"

    def predict(self, params: Any) -> PeakPrediction:
        values, _ = numeric_params(params)
        missing = [name for name in self.features if name not in values]
        if missing:
            return PeakPrediction.unknown(
                f"params lack {', '.join(missing)}, which the model uses", self.trials
            )
        if any(values[name] <= 0 for name in self.features):
            return PeakPrediction.unknown("a size the model uses is not above 0", self.trials)
        row = np.array([[1.0] + [math.log(values[name]) for name in self.features]])
        value, grad = _log_model(row, np.asarray(self.coef), self.base_bytes)
        centre = float(value[0])
        leverage = float(grad[0] @ np.asarray(self.xtx_inv) @ grad[0])
        spread = self.scale * math.sqrt(1.0 + max(leverage, 0.0))
        t = t_quantile(0.5 + self.level / 2.0, max(self.df, 1))
        low, high = centre - t * spread, centre + t * spread
        # an interval so wide it says nothing is no prediction
        if high - low > math.log(64.0) or centre > 60:
            return PeakPrediction.unknown(
                "the interval is too wide to act on (far outside the trials seen)", self.trials
            )
        return PeakPrediction(
            int(math.exp(centre)),
            max(int(math.exp(low)), int(self.base_bytes)),
            int(math.exp(high)),
            self.describe(),
            self.trials,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "base_bytes": self.base_bytes,
            "exponents": dict(zip(self.features, self.coef[1:], strict=True)),
            "scale": self.scale,
            "trials": self.trials,
            "ignored": dict(self.ignored),
            "flat": self.flat,
            "description": self.describe(),
        }


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


@dataclass(frozen=True, slots=True)
class _Candidate:
    bic: float
    base: float
    features: tuple[str, ...]
    coef: np.ndarray
    rss: float  # on log(peak)
    cov_unit: np.ndarray  # (J^T J)^-1 of the linearised fit, without the residual variance
    n: int


def _design(logs: dict[str, np.ndarray], names: Sequence[str], n: int) -> np.ndarray:
    return np.column_stack([np.ones(n)] + [logs[name] for name in names])


def _log_model(x: np.ndarray, coef: np.ndarray, base: float) -> tuple[np.ndarray, np.ndarray]:
    """log(base + exp(x @ coef)) and its gradient in ``coef`` (one row per point)."""
    inner = x @ coef
    value = np.logaddexp(math.log(base), inner) if base > 0 else inner
    weight = np.exp(inner - value)  # d value / d inner
    return value, x * weight[:, None]


def _fit_one(
    y: np.ndarray, x: np.ndarray, base: float, *, robust: bool = False
) -> tuple[np.ndarray, float, np.ndarray] | None:
    """Least squares of log(peak) on the model with a fixed floor: Gauss-Newton from the log-log
    solution of what is above the floor (a few columns: each step is one small lstsq). With
    ``robust``, iteratively reweighted (soft L1): a far-off trial pulls by its distance, not its
    square."""
    above = np.exp(y) - base
    if np.any(above <= 0):
        return None
    coef, *_ = np.linalg.lstsq(x, np.log(above), rcond=None)
    value, grad = _log_model(x, coef, base)
    rss = float(np.sum((value - y) ** 2))
    for _ in range(GN_STEPS):
        resid = value - y
        weight = 1.0 / np.sqrt(1.0 + (resid / 0.05) ** 2) if robust else np.ones_like(resid)
        root = np.sqrt(weight)
        delta, *_ = np.linalg.lstsq(grad * root[:, None], -resid * root, rcond=None)
        step = 1.0
        while step > 1e-3:
            trial = coef + step * delta
            new_value, new_grad = _log_model(x, trial, base)
            new_rss = float(np.sum(weight * (new_value - y) ** 2))
            if new_rss <= float(np.sum(weight * resid**2)):
                break
            step /= 2.0
        else:
            break
        coef, value, grad = trial, new_value, new_grad
        if abs(rss - float(np.sum((value - y) ** 2))) <= 1e-10 * max(rss, 1e-300):
            break
        rss = float(np.sum((value - y) ** 2))
    jtj = grad.T @ grad
    if not np.all(np.isfinite(jtj)) or np.linalg.cond(jtj) > 1e12:
        return None  # collinear columns, or a floor that leaves the params nothing to explain
    return coef, float(np.sum((value - y) ** 2)), np.linalg.inv(jtj)


def _partial_p(rss_small: float, rss_big: float, df_big: int) -> float:
    """p of the partial F test for one more column (``rss_small`` without it, ``rss_big`` with)."""
    f_stat = (rss_small - rss_big) / max(rss_big / max(df_big, 1), 1e-300)
    return f1_survival(max(f_stat, 0.0), max(df_big, 1))


def _best_for_base(y: np.ndarray, logs: dict[str, np.ndarray], base: float) -> _Candidate | None:
    """The params kept for one floor: backward elimination from all of them (params often matter
    only together: activations are batch x width) while one has a partial F test p over
    :data:`ENTER_P` on the residuals of log(peak); with more params than the trials support, the
    most useful ones are taken first."""
    n = len(y)
    extra = 1 if base > 0 else 0
    names = tuple(logs)
    while names and n - len(names) - 2 - extra < 2:
        names = names[:-1]  # too many for the trials: the least useful alone go first (below)
    names = _rank_alone(y, logs, base, tuple(logs))[: len(names)]
    fits: dict[tuple[str, ...], tuple[np.ndarray, float, np.ndarray] | None] = {}

    def fit(cols: tuple[str, ...]) -> tuple[np.ndarray, float, np.ndarray] | None:
        if cols not in fits:
            fits[cols] = _fit_one(y, _design(logs, cols, n), base) if cols else None
        return fits[cols]

    while names:
        full = fit(names)
        if full is None:
            names = names[:-1]
            continue
        df = n - len(names) - 1 - extra
        worst, worst_p = None, -1.0
        for name in names:
            rest = tuple(c for c in names if c != name)
            smaller = fit(rest)
            rss_small = smaller[1] if smaller is not None else float(np.sum((y - y.mean()) ** 2))
            p = _partial_p(rss_small, full[1], df)
            if p > worst_p:
                worst, worst_p = name, p
        if worst_p < ENTER_P:
            return _Candidate(_bic(full[1], n, len(names), base), base, names, full[0], full[1], full[2], n)
        names = tuple(c for c in names if c != worst)
    return None


def _rank_alone(
    y: np.ndarray, logs: dict[str, np.ndarray], base: float, names: tuple[str, ...]
) -> tuple[str, ...]:
    """``names`` by how much each alone explains (best first)."""
    scores = []
    for name in names:
        fitted = _fit_one(y, _design(logs, (name,), len(y)), base)
        scores.append((fitted[1] if fitted is not None else math.inf, name))
    return tuple(name for _, name in sorted(scores))


def _bic(rss: float, n: int, k: int, base: float) -> float:
    params = k + 1 + (1 if base > 0 else 0)
    return n * math.log(max(rss, 1e-12) / n) + params * math.log(n)


def _select(peaks: np.ndarray, logs: dict[str, np.ndarray]) -> _Candidate | None:
    """The best floor and params: a coarse grid of floors, then the midpoints beside the best."""
    y = np.log(peaks)
    floor = float(peaks.min())
    tried: dict[float, _Candidate | None] = {}

    def at(fraction: float) -> _Candidate | None:
        if fraction not in tried:
            tried[fraction] = _best_for_base(y, logs, fraction * floor)
        return tried[fraction]

    for fraction in _BASE_FRACTIONS:
        at(fraction)
    scored = [(c.bic, f) for f, c in tried.items() if c is not None]
    if not scored:
        return None
    best = min(scored)[1]
    grid = sorted(_BASE_FRACTIONS)
    i = grid.index(best)
    for neighbour in grid[max(i - 1, 0) : i] + grid[i + 1 : i + 2]:
        at((best + neighbour) / 2.0)
    return min((c for c in tried.values() if c is not None), key=lambda c: c.bic)


def _flat_fit(peaks: np.ndarray, ignored: dict[str, str], level: float) -> PeakFit | None:
    z = np.log(peaks)
    spread = float(np.std(z, ddof=1)) if len(z) > 1 else 0.0
    if spread > FLAT_SPREAD:
        return None
    n = len(z)
    return PeakFit(
        (),
        0.0,
        (float(z.mean()),),
        max(spread, MIN_SCALE),
        n - 1,
        ((1.0 / n,),),
        n,
        ignored,
        level,
        flat=True,
    )


def fit_peaks(
    observations: Sequence[tuple[Any, int]], *, min_trials: int = MIN_TRIALS, level: float = 0.95
) -> PeakFit | PeakPrediction:
    """Fit the peak model on ``(params, peak_bytes)`` of finished trials (``ok`` ones: a killed
    trial's peak is where it was stopped, not where it would have gone).

    Returns the :class:`PeakFit`, or an "unknown" :class:`PeakPrediction` saying why there is none
    (too few trials, no param explains the peaks).
    """
    rows = [(numeric_params(p), int(peak)) for p, peak in observations if peak and peak > 0]
    n = len(rows)
    if n < min_trials:
        return PeakPrediction.unknown(
            f"{n} finished trial{'s' if n != 1 else ''}; the model needs {min_trials}", n
        )
    ignored: dict[str, str] = {}
    for (_, why), _peak in rows:
        ignored.update(why)
    names = sorted({name for (values, _), _p in rows for name in values})
    logs: dict[str, np.ndarray] = {}
    for name in names:
        column = [values.get(name) for (values, _), _p in rows]
        if any(v is None for v in column):
            ignored[name] = "missing in some trials"
        elif len(set(column)) < 2:
            ignored[name] = "the same in every trial"
        elif any(v <= 0 for v in column if v is not None):
            ignored[name] = "not above 0 (a size is needed for a log-log fit)"
        else:
            logs[name] = np.log(np.array(column, dtype=float))
    peaks = np.array([peak for _, peak in rows], dtype=float)
    best = _select(peaks, logs)
    if best is None and len(peaks) >= OUTLIER_MIN_TRIALS and logs:
        # a far-off trial can hide what explains the rest: try once on a robust fit of every param
        every = _Candidate(0.0, 0.0, tuple(logs), np.zeros(len(logs) + 1), 0.0, np.eye(1), len(peaks))
        best = _reselect(peaks, logs, _outlier_mask(peaks, logs, every), None)
    elif best is not None:
        best = _reselect(peaks, logs, _outlier_mask(peaks, logs, best), best)
    if best is None:
        flat = _flat_fit(peaks, {**ignored, **{k: "does not explain the peaks" for k in logs}}, level)
        if flat is not None:
            return flat
        if n < 2 * MIN_TRIALS:
            return PeakPrediction.unknown(
                f"{n} finished trials do not yet show how the peak depends on the params", n
            )
        return PeakPrediction.unknown("the numeric params do not explain the peaks", n)
    for name in logs:
        if name not in best.features:
            ignored[name] = "does not explain the peaks"
    k = len(best.features) + 1 + (1 if best.base > 0 else 0)
    df = max(best.n - k, 1)
    scale = max(math.sqrt(best.rss / df), MIN_SCALE)
    return PeakFit(
        best.features,
        best.base,
        tuple(float(c) for c in best.coef),
        scale,
        df,
        tuple(tuple(float(v) for v in row) for row in best.cov_unit),
        n,
        ignored,
        level,
    )


def _reselect(
    peaks: np.ndarray, logs: dict[str, np.ndarray], keep: np.ndarray, best: _Candidate | None
) -> _Candidate | None:
    if keep.all():
        return best
    again = _select(peaks[keep], {name: col[keep] for name, col in logs.items()})
    return again if again is not None else best


def _outlier_mask(peaks: np.ndarray, logs: dict[str, np.ndarray], cand: _Candidate) -> np.ndarray:
    """The trials to fit on: those within :data:`OUTLIER_SCALES` robust scales of a robust refit
    of the selected model (a trial that shared its worker with a leak, or a sampling miss, is left
    out)."""
    n = len(peaks)
    keep = np.ones(n, dtype=bool)
    if n < OUTLIER_MIN_TRIALS:
        return keep
    y = np.log(peaks)
    x = _design(logs, cand.features, n)
    fitted = _fit_one(y, x, cand.base, robust=True)
    if fitted is None:
        return keep
    resid = _log_model(x, fitted[0], cand.base)[0] - y
    mad = float(np.median(np.abs(resid - np.median(resid)))) * 1.4826
    mask = np.abs(resid) <= OUTLIER_SCALES * max(mad, OUTLIER_MIN_SCALE)
    return mask if mask.sum() >= MIN_TRIALS else keep
