"""Synthetic power, false-positive rate, plateau handling and time to verdict of the leak statistics.

Run: .venv/bin/python bench/leak_detection.py [--runs 200]

Noise model (bytes after each iteration, around 500 MB), "swing" S = two standard deviations:
  * iid Gaussian, half of the variance;
  * AR(1) with phi = 0.5, the other half (allocator state carried from one iteration to the next);
  * spikes: with probability 3 % a single reading is S..2S high (a buffer held at the reading);
  * stress rows add a two-state allocator level (+S/2, switching with probability 2 % per
    iteration, i.e. held for ~50 iterations), which is indistinguishable from growth over windows
    shorter than its dwell time.
Each run is the sequential test of trainguard.leaks.stats exactly as leakcheck() runs it (looks
from 12 readings, x1.25 apart, alpha = 1 % split over the looks), up to 200 iterations.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from trainguard.leaks import stats as S

MB = 1024.0 * 1024.0
N_MAX = 200


def noise(rng: np.random.Generator, n: int, swing: float, level_switch: bool = False) -> np.ndarray:
    sd = swing / 2
    half = sd * math.sqrt(0.5)
    e = rng.normal(0, half, n)
    ar = np.zeros(n)
    ar[0] = rng.normal(0, half)
    for t in range(1, n):
        ar[t] = 0.5 * ar[t - 1] + rng.normal(0, half * math.sqrt(1 - 0.25))
    spikes = (rng.random(n) < 0.03) * rng.uniform(1, 2, n) * swing
    y = e + ar + spikes
    if level_switch:
        state, cur = np.zeros(n), 0
        for t in range(n):
            if rng.random() < 0.02:
                cur = 1 - cur
            state[t] = cur
        y += state * swing / 2
    return y


def series(kind: str, slope: float, swing: float, seed: int, level_switch: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(N_MAX + 1, dtype=float)
    if kind == "linear":
        trend = slope * t
    else:  # grows for 60 iterations, slowing down, then stops
        trend = slope * 30 * (1 - (1 - np.minimum(t, 60) / 60) ** 2)
    return 500 * MB + trend + noise(rng, t.size, swing, level_switch)


def sequential(y: np.ndarray, first_look: int = 12) -> tuple[str, int]:
    x = np.arange(y.size, dtype=float)
    looks = S.look_schedule(first_look, y.size)
    a = S.alpha_per_look(0.01, len(looks))
    for k in looks:
        d = S.decide(y[:k], x[:k], alpha=a, tolerance=1024.0, final=k == looks[-1])
        if d.verdict is not None:
            return d.verdict.value, k - 1
    raise AssertionError


def naive_ols_30(y: np.ndarray) -> bool:
    """What a short least-squares fit says: slope > 0 with 95 % confidence over 30 iterations."""
    r = sps.linregress(np.arange(31.0), y[:31])
    return r.slope - 1.96 * r.stderr > 0


def oracle_power_30(slope: float, swing: float, alpha: float = 0.01) -> float:
    """Best possible one-look power at 30 iterations with iid noise of the same variance."""
    n = 31
    se = (swing / 2) / math.sqrt(n * (n * n - 1) / 12)
    return float(sps.norm.sf(sps.norm.isf(alpha) - slope / se))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    R = args.runs
    rows = []
    t0 = time.time()
    for swing_mb in (10, 20, 35, 70):
        swing = swing_mb * MB
        for kind, slope_mb, stress in (
            ("linear", 1, False),
            ("linear", 0, False),
            ("plateau", 2, False),
            ("linear", 0, True),
        ):
            if stress and swing_mb not in (20, 70):
                continue
            verdicts, iters, naive = [], [], []
            late = []
            for seed in range(R):
                y = series(kind, slope_mb * MB, swing, seed, stress)
                v, k = sequential(y)
                verdicts.append(v)
                iters.append(k)
                naive.append(naive_ols_30(y))
                if kind == "plateau":
                    late.append(sequential(y, first_look=120)[0])
            leak = np.array([v == "leak" for v in verdicts])
            its = np.array(iters)
            row = {
                "swing_mb": swing_mb,
                "kind": kind + (" + level switch" if stress else ""),
                "slope_mb": slope_mb,
                "p_leak": float(leak.mean()),
                "p_leak_within_30": float((leak & (its <= 30)).mean()),
                "median_iters_to_leak": float(np.median(its[leak])) if leak.any() else None,
                "p90_iters_to_leak": float(np.percentile(its[leak], 90)) if leak.any() else None,
                "p_naive_ols_leak_at_30": float(np.mean(naive)),
                "oracle_power_30": oracle_power_30(slope_mb * MB, swing)
                if kind == "linear" and slope_mb
                else None,
                "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
            }
            if late:
                row["p_leak_looking_from_120"] = float(np.mean([v == "leak" for v in late]))
            rows.append(row)
    elapsed = time.time() - t0

    # time per decision (what leakcheck pays at each look)
    y = series("linear", MB, 20 * MB, 0)
    t = time.perf_counter()
    for _ in range(20):
        S.decide(y[:200], alpha=0.001, tolerance=1024.0)
    decide_ms = (time.perf_counter() - t) / 20 * 1000

    import scipy

    print(f"# leak detection, synthetic ({R} seeded runs per row, up to {N_MAX} iterations)\n")
    print(
        f"{datetime.date.today()}, Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}\n"
    )
    print(
        "| swing (±MB) | series | P(leak) | P(leak ≤ 30 it) | median / p90 it to leak | naive LSQ@30 P(leak) | oracle power@30 | verdicts |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        med = (
            "-"
            if r["median_iters_to_leak"] is None
            else f"{r['median_iters_to_leak']:.0f} / {r['p90_iters_to_leak']:.0f}"
        )
        oracle = "-" if r["oracle_power_30"] is None else f"{r['oracle_power_30']:.0%}"
        series_name = (
            f"{r['kind']} {r['slope_mb']} MB/it"
            if r["kind"].startswith("linear")
            else "grows 60 MB over 60 it, then flat"
        )
        extra = (
            f" (looking from it 120: {r['p_leak_looking_from_120']:.1%})"
            if "p_leak_looking_from_120" in r
            else ""
        )
        print(
            f"| {r['swing_mb']} | {series_name} | {r['p_leak']:.1%}{extra} | {r['p_leak_within_30']:.1%} | {med} | "
            f"{r['p_naive_ols_leak_at_30']:.1%} | {oracle} | {r['verdicts']} |"
        )
    print(f"\none decide() on 200 readings: {decide_ms:.1f} ms; whole benchmark {elapsed:.0f} s")
    out = Path(__file__).parent / "results" / "leak_detection.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {"date": str(datetime.date.today()), "runs": R, "rows": rows, "decide_ms": decide_ms}, indent=1
        )
    )


if __name__ == "__main__":
    main()
