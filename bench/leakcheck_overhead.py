"""Overhead of leakcheck on the time of the iterations themselves.

Run: .venv/bin/python bench/leakcheck_overhead.py [--attribution] [--before SRC]

``--attribution`` keeps the censuses on (the default of leakcheck; off by default here, as the
first version of this benchmark measured). ``--before SRC`` runs every row twice, alternating, in
fresh processes: once with PYTHONPATH=SRC (the code before a change) and once with this tree.

For steps of several durations, times a plain loop (per call), then runs
``leakcheck(attribution=False, max_time="8s")`` with ``min_iterations`` above what fits (so it cannot
stop early) and reports its wall time over the same number of plain calls. Setup and process start
are excluded; the default time budget decides the batching, as in real use.
"""

from __future__ import annotations

import datetime
import json
import platform
import time
from pathlib import Path

import numpy as np

import trainguard

A = np.random.default_rng(0).standard_normal((300, 300)).astype("float32")


def make_step(seconds: float):
    def step() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            A @ A[:, :8]

    return step


def one_row(step_s: float, attribution: bool, budget_s: float = 8.0) -> dict:
    step = make_step(step_s)
    n = max(8, int(budget_s / step_s))
    t = time.perf_counter()
    for _ in range(n):
        step()
    per_call = (time.perf_counter() - t) / n
    rep = trainguard.leakcheck(step, attribution=attribution, min_iterations=10**9, max_time=budget_s)
    return {
        "step_s": step_s,
        "attribution": attribution,
        "plain_per_call_s": per_call,
        "iterations": rep.iterations,
        "leakcheck_s": rep.elapsed_s,
        "ratio": rep.elapsed_s / (rep.iterations * per_call),
        "calls_per_measurement": rep.calls_per_measurement,
        "measurements": rep.measurements,
        "censuses": (getattr(rep, "counts", None) or {}).get("censuses"),
    }


def compare(before: str, attribution: bool) -> None:
    """Each row in fresh processes, the code before (PYTHONPATH=before) and this tree, alternating."""
    import os
    import subprocess
    import sys

    print(f"# leakcheck overhead, before / after (attribution {'on' if attribution else 'off'})\n")
    print("| step | before: ratio | censuses | after: ratio | censuses |")
    print("|---|---|---|---|---|")
    rows = []
    for step_s in (0.0005, 0.005, 0.05, 0.5):
        pair = []
        for src in (before, os.environ.get("PYTHONPATH", "")):
            cmd = [sys.executable, __file__, "--one", str(step_s)] + (
                ["--attribution"] if attribution else []
            )
            out = subprocess.run(
                cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=src), check=True
            )
            pair.append(json.loads(out.stdout.strip().splitlines()[-1]))
        rows.append({"before": pair[0], "after": pair[1]})
        b, a = pair
        print(
            f"| {step_s * 1000:g} ms | {b['ratio']:.3f} | {b['censuses'] or '-'} | {a['ratio']:.3f} | {a['censuses'] or '-'} |",
            flush=True,
        )
    out_path = (
        Path(__file__).parent
        / "results"
        / f"leakcheck_overhead_compare{'_attribution' if attribution else ''}.json"
    )
    out_path.parent.mkdir(exist_ok=True)
    out_path.write_text(json.dumps({"date": str(datetime.date.today()), "rows": rows}, indent=1))


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--attribution", action="store_true", help="censuses on (leakcheck's default)")
    ap.add_argument(
        "--before", metavar="SRC", default=None, help="compare with the code in SRC, side by side"
    )
    ap.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one_row(args.one, args.attribution)))
        return
    if args.before:
        compare(args.before, args.attribution)
        return
    # min_iterations above what fits: the check cannot stop early and runs its whole budget
    rows = [one_row(step_s, args.attribution) for step_s in (0.0005, 0.005, 0.05, 0.5)]
    print(f"# leakcheck overhead (attribution {'on' if args.attribution else 'off'})\n")
    print(
        f"{datetime.date.today()}, Python {platform.python_version()}, trainguard {trainguard.__version__}\n"
    )
    print(
        "| step | iterations in 8 s | same calls in a plain loop | under leakcheck | ratio | calls per reading | readings |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['step_s'] * 1000:g} ms | {r['iterations']} | {r['iterations'] * r['plain_per_call_s']:.2f} s | "
            f"{r['leakcheck_s']:.2f} s | {r['ratio']:.3f} | {r['calls_per_measurement']} | {r['measurements']} |"
        )
    out = Path(__file__).parent / "results" / "leakcheck_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"date": str(datetime.date.today()), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
