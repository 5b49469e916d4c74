"""``no_leak`` from exact evidence on synthetic slow steps: how often, how soon, and how often it is
false (RSS grows, counts and bytes in use do not: memory outside malloc and Python objects).

Run: .venv/bin/python bench/flat_evidence_rates.py [--runs 2000] [--jobs 2]

Each run is one slow step in the default 2-minute budget (a step of S seconds: 120 / S calls, one
reading a call), simulated by the loop's own pure decisions (``_plan.calibrate`` and ``_plan.look``,
as ``bench/leak_false_rate.py`` does): RSS is 600 MB + ``L`` bytes a call + noise (the noise model
of ``bench/leak_detection.py``: half iid, half AR(1) with phi 0.5, 3 % spikes; "swing" is two
standard deviations), bytes in use are flat with a jitter, and every counted kind is exactly flat
from call 1 on (a census at each of the first 4 calls, then every 3rd). ``L`` is a multiple of the
default tolerance (1 MiB per minute of step time). Each run is decided twice from the same
readings: with the exact evidence (``flat_support``) and without it (RSS alone, the check before),
so the two columns are side by side on the very same series. A ``no_leak`` at ``L`` above the
tolerance is a false ``no_leak``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from leak_false_rate import noise  # noqa: E402

MB = 1024.0 * 1024.0
KB = 1024.0
BUDGET_S = 120.0


def census_iterations(calls: int) -> list[int]:
    """The calls a census follows: each of the first 4 (the call-by-call phase), then every 3rd."""
    return [i for i in range(calls + 1) if i <= 4 or i % 3 == 0]


def decide_run(
    seed: int, step_s: float, swing: float, leak_x: float, jitter: float
) -> dict[str, tuple[str, int]]:
    from trainguard.leaks import _evidence, _native, _plan
    from trainguard.leaks._run import make_config

    config = make_config(max_time=BUDGET_S)
    calls = int(BUDGET_S // step_s)
    tolerance = _plan.auto_tolerance(step_s)
    rng = np.random.default_rng(seed)
    t = np.arange(calls + 1, dtype=float)
    rss = 600 * MB + leak_x * tolerance * t + noise(rng, t.size, swing)
    in_use = 300 * MB + rng.normal(0, jitter, t.size)
    censuses = set(census_iterations(calls))
    series: list[dict] = []
    plan = None
    out: dict[str, tuple[str, int]] = {}
    for i in range(calls + 1):
        series.append({"iteration": i, "bytes": float(rss[i]), _native.KEY: int(in_use[i])})
        elapsed = (i + 1) * step_s
        if plan is None and len(series) >= 3:
            plan = _plan.calibrate(
                config, series, iterations=i, measure_cost_s=0.01, step_time_s=step_s, elapsed_s=elapsed
            )
        final = _plan.out_of_budget(config, series, iterations=i, elapsed_s=elapsed, next_block_s=step_s)
        if plan is None or not (final or len(series) in plan.schedule):
            continue
        taken = [c for c in censuses if 1 <= c <= i]
        flat = _evidence.FlatCounts(1, len(taken), max(taken, default=1) - 1, 40) if taken else None
        for name, support in (("after", flat), ("before", None)):
            if name in out:
                continue
            res = _plan.look(
                config,
                plan,
                series,
                iterations=i,
                elapsed_s=elapsed,
                step_time_s=step_s,
                final=final,
                key="bytes",
                flat_support=support,
            )
            if res.stop:
                v = res.decision.verdict
                out[name] = (v.value if v is not None else "inconclusive", i)
        if len(out) == 2:
            break
    return out


def _chunk(args: tuple[int, int, float, float, float, float, float]) -> list[dict[str, tuple[str, int]]]:
    from trainguard.leaks import stats

    start, n, step_s, swing, leak_x, jitter, cap = args
    stats.FLAT_RSS_CAP = cap  # the rule's cap under study (the shipped default unless --cap)
    return [decide_run(seed, step_s, swing, leak_x, jitter) for seed in range(start, start + n)]


def wilson_high(k: int, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 1.0
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return min(1.0, c + h)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=float, nargs="*", default=[1.5, 5.0], help="step times, seconds")
    ap.add_argument("--swings", type=float, nargs="*", default=[2.0, 20.0], help="RSS swing, MB")
    ap.add_argument("--leaks", type=float, nargs="*", default=[0, 1, 1.5, 2, 4, 8], help="x tolerance")
    ap.add_argument("--jitter-kb", type=float, default=2.0, help="bytes in use jitter, one sd, KiB")
    ap.add_argument(
        "--cap", type=float, default=None, help="RSS interval cap in tolerances (default: shipped)"
    )
    args = ap.parse_args()
    from trainguard.leaks import stats

    cap = stats.FLAT_RSS_CAP if args.cap is None else args.cap
    t0 = time.perf_counter()
    rows = []
    chunk = max(1, math.ceil(args.runs / (4 * args.jobs)))
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for step_s in args.steps:
            for swing in args.swings:
                for leak_x in args.leaks:
                    tasks = [
                        (s, min(chunk, args.runs - s), step_s, swing * MB, leak_x, args.jitter_kb * KB, cap)
                        for s in range(0, args.runs, chunk)
                    ]
                    res = [r for part in pool.map(_chunk, tasks) for r in part]
                    rows.append(summarize(res, step_s, swing, leak_x))
    wall = time.perf_counter() - t0
    print(
        f"## no_leak from exact evidence, synthetic slow steps ({args.runs} runs a row, cap {cap:g}, {wall:.0f} s)\n"
    )
    print(
        "| step | swing | RSS-only leak | no_leak: before → after | leak: before → after | median calls to no_leak: before → after |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['step_s']} s | ±{r['swing_mb']:g} MB | {r['leak_x']:g} × tol | "
            f"{r['before']['no_leak']:.1%} → {r['after']['no_leak']:.1%} (≤ {r['after']['no_leak_high']:.2%}) | "
            f"{r['before']['leak']:.1%} → {r['after']['leak']:.1%} | "
            f"{r['before']['calls'] or '-'} → {r['after']['calls'] or '-'} |"
        )
    out = Path(__file__).parent / "results" / "flat_evidence_rates.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "args": vars(args),
                "rows": rows,
                "wall_s": wall,
            },
            indent=1,
        )
    )


def summarize(res: list[dict[str, tuple[str, int]]], step_s: float, swing: float, leak_x: float) -> dict:
    row: dict = {"step_s": step_s, "swing_mb": swing, "leak_x": leak_x}
    n = len(res)
    for name in ("before", "after"):
        verdicts = [r[name][0] for r in res]
        no_leak_calls = [r[name][1] for r in res if r[name][0] == "no_leak"]
        k = verdicts.count("no_leak")
        row[name] = {
            "no_leak": k / n,
            "no_leak_high": wilson_high(k, n),
            "leak": verdicts.count("leak") / n,
            "inconclusive": verdicts.count("inconclusive") / n,
            "calls": int(np.median(no_leak_calls)) if no_leak_calls else None,
        }
    return row


if __name__ == "__main__":
    main()
