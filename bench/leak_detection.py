"""Synthetic power, false-positive rate, plateau handling and time to verdict of the leak statistics.

Run: .venv/bin/python bench/leak_detection.py [--runs 200]

Noise model (bytes after each iteration, around 500 MB), "swing" S = two standard deviations:
  * iid Gaussian, half of the variance;
  * AR(1) with phi = 0.5, the other half (allocator state carried from one iteration to the next);
  * spikes: with probability 3 % a single reading is S..2S high (a buffer held at the reading);
  * stress rows add a two-state allocator level (+S/2, switching with probability 2 % per
    iteration, i.e. held for ~50 iterations), which is indistinguishable from growth over windows
    shorter than its dwell time.
Each run is the sequential test of trainguard.leaks.stats as leakcheck() runs it by default (looks
from 12 readings, x1.25 apart, alpha = 1 % split over the looks, one reading per call) in three
regimes of the default 2-minute budget, which set how many calls fit and the gate before a leak
verdict (``min_iterations=None``):
  * fast step (<= 0.6 s): 200 calls simulated, no leak verdict before call 120;
  * 1.2 s step: 100 calls fit, gate 60 calls (60 % of the budget), strict leak test below 120;
  * 2.4 s step: 50 calls fit, gate 30 calls, strict leak test.
Series: a steady leak; no leak; a warm-up that grows 60 MB over 60 calls, slowing down, then
stops; a ramp that grows linearly for 80 calls then stops (0.5 MB/call, 40 MB; the hard case: it
does not slow down before it stops); no leak with a two-state allocator level.
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
from trainguard.leaks._plan import LEAK_GATE_ITERATIONS

MB = 1024.0 * 1024.0
N_MAX = 200
GATE_TARGET = LEAK_GATE_ITERATIONS  # the gate leakcheck itself uses
REGIMES = {"fast": (200, 120), "1.2s": (100, 60), "2.4s": (50, 30)}  # calls in budget, leak gate


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
    elif kind == "ramp80":  # linear for 80 iterations, then stops
        trend = slope * np.minimum(t, 80)
    else:  # grows for 60 iterations, slowing down, then stops
        trend = slope * 30 * (1 - (1 - np.minimum(t, 60) / 60) ** 2)
    return 500 * MB + trend + noise(rng, t.size, swing, level_switch)


def sequential(
    y: np.ndarray, first_look: int = 12, gate: int = 0, strong_below: int = 0, alpha: float = 0.01
) -> tuple[str, int]:
    """The verdict and the call count it came at; ``gate``: no leak verdict before that many calls
    (except at the last look); ``strong_below``: the strict leak test below that many calls."""
    x = np.arange(y.size, dtype=float)
    looks = S.look_schedule(first_look, y.size)
    a = S.alpha_per_look(alpha, len(looks))
    for k in looks:
        final = k == looks[-1]
        d = S.decide(y[:k], x[:k], alpha=a, tolerance=1024.0, final=final, strong=k - 1 < strong_below)
        if d.verdict is None or (d.verdict.value == "leak" and k - 1 < gate and not final):
            continue
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


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, c - h), min(1.0, c + h)


# ------------------------------------------------------------------------------------------------
# count evidence: memory series with the exact counts a census would read beside them, decided by
# the leak loop's own functions (leaks._plan.calibrate / look and leaks._evidence.count_support)

STEP_S = {"fast": 0.01, "1.2s": 1.2, "2.4s": 2.4}
COUNT_KINDS = {
    # name: (kind label, leaks?, counts(t), bytes held(t))
    "cache fills to 60 entries of 1 MB, then hits": (
        "numpy.ndarray",
        False,
        lambda t: np.minimum(t, 60),
        lambda t: MB * np.minimum(t, 60),
    ),
    "cache fills to 128 entries of 1 MB, then hits": (
        "numpy.ndarray",
        False,
        lambda t: np.minimum(t, 128),
        lambda t: MB * np.minimum(t, 128),
    ),
    "pool fills 70 calls, entries shrinking 2 MB -> 64 KB": (
        "numpy.ndarray",
        False,
        lambda t: np.minimum(t, 70),
        lambda t: np.cumsum(np.where(t <= 70, 2 * MB * (1 - np.minimum(t, 70) / 71) + 64 * 1024, 0)),
    ),
    "cache of 5 models (1,084 graph ops each), then hits": (
        "tensorflow.Operation",
        False,
        lambda t: 1084 * np.minimum(t, 5),
        lambda t: 10 * MB * np.minimum(t, 5),
    ),
    "no leak, counts come and go (Poisson 500)": ("python.pkg.Thing", False, None, lambda t: 0 * t),
    "leak: +1 array of 1 MB a call": ("numpy.ndarray", True, lambda t: t, lambda t: MB * t),
    "leak: +1,084 graph ops a call, 4 MB": (
        "tensorflow.Operation",
        True,
        lambda t: 1084 * t,
        lambda t: 4 * MB * t,
    ),
}


def with_counts(
    y: np.ndarray, counts: np.ndarray, kind: str, regime: str, use_counts: bool = True
) -> tuple[str, int]:
    """The loop's decisions over one series: calibrate after 3 readings, count evidence and a
    look on the schedule; returns the verdict and the calls it came at."""
    from trainguard.leaks import _evidence, _plan
    from trainguard.leaks._run import make_config

    budget, _ = REGIMES[regime]
    step_s = STEP_S[regime]
    config = make_config(max_time=120.0)
    series, points, plan = [], [], None
    for i in range(budget + 1):
        series.append({"iteration": i, "bytes": float(y[i])})
        points.append(
            _evidence.CountPoint(
                i, {kind: (int(counts[i]), 0 if kind.startswith("tensorflow") else int(y[i] - y[0]))}, {}
            )
        )
        if plan is None and len(series) >= 3:
            plan = _plan.calibrate(
                config, series, iterations=i, measure_cost_s=0.001, step_time_s=step_s, elapsed_s=i * step_s
            )
        final = i == budget
        if plan is None or not (final or len(series) in plan.schedule):
            continue
        support = _evidence.count_support(points, series, alpha=plan.alpha_per_look)
        res = _plan.look(
            config,
            plan,
            series,
            iterations=i,
            elapsed_s=i * step_s,
            step_time_s=step_s,
            final=final,
            key="bytes",
            count_support=support.supports and use_counts,
        )
        if res.stop:
            return (res.decision.verdict.value if res.decision.verdict else "inconclusive"), i
    raise AssertionError


def count_rows(runs: int, swing_mb: float) -> list[dict]:
    rows = []
    for name, (kind, leaks, count_fn, bytes_fn) in COUNT_KINDS.items():
        for regime, (budget, _) in REGIMES.items():
            verdicts, calls, before = [], [], []
            for seed in range(runs):
                rng = np.random.default_rng(10_000 + seed)
                t = np.arange(budget + 1, dtype=float)
                y = 500 * MB + bytes_fn(t) + noise(rng, t.size, swing_mb * MB)
                counts = rng.poisson(500, t.size) if count_fn is None else count_fn(t) + 40
                v, k = with_counts(y, counts, kind, regime)
                before.append(with_counts(y, counts, kind, regime, use_counts=False))
                verdicts.append(v)
                calls.append(k)
            leak = np.array([v == "leak" for v in verdicts])
            lo, hi = wilson(int(leak.sum()), runs)
            rows.append(
                {
                    "series": name,
                    "leaks": leaks,
                    "regime": regime,
                    "runs": runs,
                    "p_leak": float(leak.mean()),
                    "p_leak_ci95": [lo, hi],
                    "median_calls_to_leak": float(np.median(np.array(calls)[leak])) if leak.any() else None,
                    "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
                    "p_leak_memory_only": float(np.mean([b[0] == "leak" for b in before])),
                    "median_calls_memory_only": _median_leak_calls(before),
                }
            )
    return rows


def _median_leak_calls(results: list[tuple[str, int]]) -> float | None:
    calls = [k for v, k in results if v == "leak"]
    return float(np.median(calls)) if calls else None


def print_count_rows(rows: list[dict], swing_mb: float) -> dict:
    print(f"\n## count evidence (swing ±{swing_mb:g} MB; counts read at every reading)\n")
    print(
        "| series | regime | P(leak), memory only (before) | P(leak) with counts [95 % CI] | median calls to leak, before / with counts | verdicts with counts |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["p_leak_ci95"]
        med = "-" if r["median_calls_to_leak"] is None else f"{r['median_calls_to_leak']:.0f}"
        old = "-" if r["median_calls_memory_only"] is None else f"{r['median_calls_memory_only']:.0f}"
        print(
            f"| {r['series']} | {r['regime']} | {r['p_leak_memory_only']:.1%} | {r['p_leak']:.1%} [{lo:.1%}, {hi:.1%}] | "
            f"{old} / {med} | {r['verdicts']} |"
        )
    fp = [r for r in rows if not r["leaks"]]
    k = sum(round(r["p_leak"] * r["runs"]) for r in fp)
    n = sum(r["runs"] for r in fp)
    lo, hi = wilson(k, n)
    k0 = sum(round(r["p_leak_memory_only"] * r["runs"]) for r in fp)
    added = sum(max(0, round((r["p_leak"] - r["p_leak_memory_only"]) * r["runs"])) for r in fp)
    churn = [r for r in fp if "Poisson" in r["series"]]
    kc, nc = sum(round(r["p_leak"] * r["runs"]) for r in churn), sum(r["runs"] for r in churn)
    print(
        f"\nnon-leaking count series pooled: called leak {k0}/{n} from memory alone, {k}/{n} with counts "
        f"(95 % CI {lo:.2%} .. {hi:.2%}); runs where counts added a false leak: {added}; "
        f"plain noise with churning counts: {kc}/{nc}"
    )
    return {
        "k": k,
        "n": n,
        "ci95": [lo, hi],
        "k_memory_only": k0,
        "added_by_counts": added,
        "churn": [kc, nc],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument(
        "--fp-runs", type=int, default=None, help="runs for the plain-noise rows (default --runs)"
    )
    ap.add_argument("--swings", default="10,20,70", help="comma-separated swings in MB")
    ap.add_argument(
        "--regimes", default=",".join(REGIMES), help="comma-separated, among " + ", ".join(REGIMES)
    )
    ap.add_argument(
        "--legacy",
        action="store_true",
        help="no leak gate and no strict test (the detector before the gates)",
    )
    ap.add_argument("--count-runs", type=int, default=0, help="runs per count-evidence row (0: skip them)")
    ap.add_argument("--counts-only", action="store_true", help="only the count-evidence rows")
    args = ap.parse_args()
    if args.count_runs or args.counts_only:
        swing = 20.0
        crow = count_rows(args.count_runs or 300, swing)
        summary = print_count_rows(crow, swing)
        out = Path(__file__).parent / "results" / "leak_detection_counts.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(
            json.dumps({"date": str(datetime.date.today()), "rows": crow, "false_leak": summary}, indent=1)
        )
        if args.counts_only:
            return
    R = args.runs
    rows = []
    t0 = time.time()
    kinds = (
        ("linear", 1, False),
        ("linear", 0, False),
        ("plateau", 2, False),
        ("ramp80", 0.5, False),
        ("linear", 0, True),
    )
    for swing_mb in [int(v) for v in args.swings.split(",")]:
        swing = swing_mb * MB
        for kind, slope_mb, stress in kinds:
            for regime, (budget, gate) in REGIMES.items():
                if regime not in args.regimes.split(","):
                    continue
                if args.legacy:
                    gate = 0
                verdicts, iters = [], []
                naive = []
                runs = (args.fp_runs or R) if (kind == "linear" and slope_mb == 0 and not stress) else R
                for seed in range(runs):
                    y = series(kind, slope_mb * MB, swing, seed, stress)[: budget + 1]
                    v, k = sequential(
                        y, gate=gate, strong_below=0 if args.legacy else GATE_TARGET, alpha=args.alpha
                    )
                    verdicts.append(v)
                    iters.append(k)
                    if regime == "fast":
                        naive.append(naive_ols_30(y))
                leak = np.array([v == "leak" for v in verdicts])
                its = np.array(iters)
                lo, hi = wilson(int(leak.sum()), runs)
                rows.append(
                    {
                        "swing_mb": swing_mb,
                        "kind": kind + (" + level switch" if stress else ""),
                        "slope_mb": slope_mb,
                        "regime": regime,
                        "runs": runs,
                        "budget_calls": budget,
                        "gate_calls": gate,
                        "p_leak": float(leak.mean()),
                        "p_leak_ci95": [lo, hi],
                        "median_iters_to_leak": float(np.median(its[leak])) if leak.any() else None,
                        "p90_iters_to_leak": float(np.percentile(its[leak], 90)) if leak.any() else None,
                        "p_naive_ols_leak_at_30": float(np.mean(naive)) if naive else None,
                        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
                    }
                )
    elapsed = time.time() - t0

    y = series("linear", MB, 20 * MB, 0)
    t = time.perf_counter()
    for _ in range(20):
        S.decide(y[:200], alpha=0.001, tolerance=1024.0)
    decide_ms = (time.perf_counter() - t) / 20 * 1000

    import scipy

    print(
        f"# leak detection, synthetic ({R} seeded runs per row, alpha {args.alpha}"
        + (", legacy: no gate, no strict test" if args.legacy else "")
        + ")\n"
    )
    print(
        f"{datetime.date.today()}, Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}\n"
    )
    print(
        "| swing (±MB) | series | regime (calls fit / leak gate) | P(leak) [95 % CI] | median / p90 calls to leak | naive LSQ@30 | verdicts |"
    )
    print("|---|---|---|---|---|---|---|")
    names = {
        "linear": "leak {s} MB/call",
        "plateau": "grows 60 MB over 60 calls, slowing, then flat",
        "ramp80": "grows 0.5 MB/call for 80 calls, then flat",
    }
    for r in rows:
        med = (
            "-"
            if r["median_iters_to_leak"] is None
            else f"{r['median_iters_to_leak']:.0f} / {r['p90_iters_to_leak']:.0f}"
        )
        base = r["kind"].split(" ")[0]
        name = (
            names[base].format(s=r["slope_mb"])
            if not (base == "linear" and r["slope_mb"] == 0)
            else "no leak"
        )
        if "level switch" in r["kind"]:
            name += " + level switch"
        naive = "-" if r["p_naive_ols_leak_at_30"] is None else f"{r['p_naive_ols_leak_at_30']:.1%}"
        lo, hi = r["p_leak_ci95"]
        print(
            f"| {r['swing_mb']} | {name} | {r['regime']} ({r['budget_calls']} / {r['gate_calls']}) | "
            f"{r['p_leak']:.1%} [{lo:.1%}, {hi:.1%}] | {med} | {naive} | {r['verdicts']} |"
        )
    # false-positive rate pooled over the no-leak rows (plain noise, every swing and regime)
    fp = [r for r in rows if r["kind"] == "linear" and r["slope_mb"] == 0]
    k = sum(round(r["p_leak"] * r["runs"]) for r in fp)
    n = sum(r["runs"] for r in fp)
    lo, hi = wilson(k, n)
    print(
        f"\nfalse-positive rate on plain noise, pooled: {k}/{n} = {k / n:.2%} (95 % CI {lo:.2%} .. {hi:.2%})"
    )
    fps = [r for r in rows if "level switch" in r["kind"]]
    k2 = sum(round(r["p_leak"] * R) for r in fps)
    print(f"with a two-state allocator level: {k2}/{R * len(fps)} = {k2 / (R * len(fps)):.2%}")
    print(f"one decide() on 200 readings: {decide_ms:.1f} ms; whole benchmark {elapsed:.0f} s")
    out = (
        Path(__file__).parent / "results" / ("leak_detection" + ("_legacy" if args.legacy else "") + ".json")
    )
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "date": str(datetime.date.today()),
                "runs": R,
                "alpha": args.alpha,
                "rows": rows,
                "decide_ms": decide_ms,
                "false_positive": {"k": k, "n": n, "ci95": [lo, hi]},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
