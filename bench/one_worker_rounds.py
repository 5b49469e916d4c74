"""The Runner with one worker against the naive loop, in alternating rounds: the ratio and its spread.

One comparison of two ~60 s runs on a shared machine moves by several per cent from run to run, so a
single ratio near 1.0 says little. Each round runs the naive loop (one process, the seed's Keras
fit ``trials`` times) and the Runner with one worker on the same fits, in alternating order (naive
first in even rounds, Runner first in odd ones, so neither always runs on a warmer machine), and
pairs the two walls of the round. Where the Runner's time goes is read from its store: the sum of
the trials' own durations, the first trial of each worker (which pays the framework import) against
the median trial, and what is left between trials (dispatch, results, recycles).

    .venv/bin/python bench/one_worker_rounds.py --rounds 2     # about 4-5 minutes
    .venv/bin/python bench/one_worker_rounds.py --rounds 2 --grow   # the fit left to grow in the worker

``--grow`` runs the Runner with ``tf_custom_gradients=False``: the worker keeps the Keras fit's
per-fit growth as the naive loop does, so it is recycled and pays a TensorFlow import each time.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _runner_breakdown(store: str, name: str) -> dict[str, Any]:
    from trainguard.store import Store

    with Store(store, readonly=True) as reader:
        run = reader.get_run(name)
        attempts = sorted(reader.attempts(run.run_id), key=lambda a: a.started_at)
        workers = reader.workers(run.run_id)
    durations = [a.duration_s or 0.0 for a in attempts]
    median = statistics.median(durations)
    firsts = {}
    for a in attempts:
        firsts.setdefault(a.worker_id, a)
    windows = sum((a.finished_at or a.started_at) - a.started_at for a in attempts)
    span = max(a.finished_at or 0.0 for a in attempts) - min(w.started_at for w in workers)
    return {
        "workers": len(workers),
        "sum_trial_s": round(sum(durations), 2),
        "median_trial_s": round(median, 3),
        "first_trial_extra_s": round(sum((a.duration_s or 0.0) - median for a in firsts.values()), 2),
        "outside_trials_s": round(windows - sum(durations), 2),
        "between_trials_s": round(span - windows, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (naive, Runner) (default 2)")
    parser.add_argument("--trials", type=int, default=40, help="trials per run (default 40)")
    parser.add_argument(
        "--grow",
        action="store_true",
        help="Runner(tf_custom_gradients=False): the worker grows and is recycled",
    )
    parser.add_argument(
        "--out", default=str(HERE / "results" / "one_worker_rounds.json"), help="where to write the JSON"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.trials < 2:
        parser.error("--rounds must be >= 1 and --trials >= 2")
    from trainguard._measured_loop import run_naive
    from trainguard.demo import run_with_runner, versions
    from trainguard.store import Store

    scratch = tempfile.mkdtemp(prefix="trainguard-rounds-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # the store is scratch: figures are printed
    store = os.path.join(scratch, "rounds.db")
    rounds = []
    for r in range(args.rounds):
        walls: dict[str, float] = {}
        order = ("naive", "runner") if r % 2 == 0 else ("runner", "naive")
        breakdown: dict[str, Any] = {}
        for which in order:
            print(f"[{time.strftime('%H:%M:%S')}] round {r + 1}: {which} ...", file=sys.stderr, flush=True)
            if which == "runner":
                if args.grow:
                    sys.path.insert(0, str(HERE))
                    from runner_bench import bench_runner_general

                    row = bench_runner_general(
                        f"(b) rounds {r}",
                        "trainguard.workloads:keras_fit",
                        args.trials,
                        store,
                        workers=1,
                        runner_kwargs={"tf_custom_gradients": False},
                    )
                    wall, peak = row["wall_s"], row["peak_rss_bytes"]
                    with Store(store, readonly=True) as reader:
                        name = reader.list_runs()[-1].name
                else:
                    name = f"rounds-{os.getpid()}-{r}"
                    half = run_with_runner(args.trials, store=store, workers=1, name=name)
                    wall, peak = half.wall_s, half.peak_rss_bytes
                breakdown = _runner_breakdown(store, name)
            else:
                half = run_naive(args.trials)
                wall, peak = half.wall_s, half.peak_rss_bytes
            walls[which] = wall
            walls[f"{which}_peak_mib"] = round(peak / 2**20, 1)
        ratio = walls["runner"] / walls["naive"]
        rounds.append({"round": r + 1, "order": list(order), **walls, "ratio": round(ratio, 4), **breakdown})
        print(f"    {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    ratios = [row["ratio"] for row in rounds]
    summary = {
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "pooled_ratio": round(sum(r["runner"] for r in rounds) / sum(r["naive"] for r in rounds), 4),
    }
    out = {
        "trials": args.trials,
        "grow": args.grow,
        "rounds": rounds,
        "summary": summary,
        "versions": versions(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(
        "| round | order | naive s | Runner s | Runner / naive | Runner workers | first trials' extra s | between trials s |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rounds:
        print(
            f"| {row['round']} | {' then '.join(row['order'])} | {row['naive']:.1f} | {row['runner']:.1f} | "
            f"{row['ratio']:.3f} | {row['workers']} | {row['first_trial_extra_s']:.1f} | {row['between_trials_s']:.2f} |"
        )
    print(
        f"\nRunner / naive: median {summary['median_ratio']:.3f}, range {summary['min_ratio']:.3f}-"
        f"{summary['max_ratio']:.3f}, pooled {summary['pooled_ratio']:.3f} ({len(rounds)} rounds)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
