"""Benchmark: the per-trial cost of the portable process tier against the Linux tier, side by side.

    .venv/bin/python bench/tier_overhead.py              # ~2 min
    .venv/bin/python bench/tier_overhead.py --rounds 2 --trials 20

Each round runs, for each tier in turn (order alternating between rounds), the same two runs:
``--trials`` tiny trials through one warm worker (the per-trial cost: dispatch, result, the
sampler's reads at ``sample_interval``), and ``--fresh`` trials with a new worker each
(``max_trials_per_worker=1``: start, tree set-up, end and the leftover sweep). Then the cost of one
reading of a worker tree that holds 16 threads and 4 child processes, by each tier's tree reader
(the Linux tier: ``/proc/PID/statm`` kept open; portable: psutil's children walk and memory_info).
Medians over rounds; ratios are portable / Linux. Writes bench/results/tier_overhead.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRIALS = str(HERE.parent / "tests" / "integration" / "runner_trials.py")
TIERS = ("auto", "portable")


def _runs(tier: str, trials: int, fresh: int) -> tuple[float, float]:
    from trainguard import Policy, Runner

    with Runner(store=None, tree_tracking=tier, sample_interval="100ms") as runner:
        runner.map(f"{TRIALS}:echo", [{"x": -1}])  # the worker's start is not a trial's cost
        start = time.perf_counter()
        runner.map(f"{TRIALS}:echo", [{"x": i} for i in range(trials)])
        warm = (time.perf_counter() - start) / trials
    with Runner(store=None, tree_tracking=tier, policy=Policy(max_trials_per_worker=1)) as runner:
        start = time.perf_counter()
        runner.map(f"{TRIALS}:echo", [{"x": i} for i in range(fresh)])
        each = (time.perf_counter() - start) / fresh
    return warm, each


def _reads(reads: int) -> dict[str, float]:
    from trainguard.process import ProcessTree
    from trainguard.process.portable import PortableTree

    code = (
        "import subprocess, sys, threading, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']) for _ in range(4)]\n"
        "[threading.Thread(target=time.sleep, args=(120,), daemon=True).start() for _ in range(16)]\n"
        "time.sleep(120)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(2.0)
        out = {}
        for name, tree in (("auto", ProcessTree(root.pid)), ("portable", PortableTree(root.pid))):
            tree.read(rediscover=True)
            start = time.perf_counter()
            for _ in range(reads):
                tree.read()
            out[name] = (time.perf_counter() - start) / reads
            assert len(tree.pids()) == 5, tree.pids()
            tree.close()
        return out
    finally:
        PortableTree(root.pid).kill()
        root.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--fresh", type=int, default=6)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, list[float]]] = {t: {"warm_s": [], "fresh_s": [], "read_s": []} for t in TIERS}
    for r in range(args.rounds):
        for tier in TIERS if r % 2 == 0 else TIERS[::-1]:
            warm, fresh = _runs(tier, args.trials, args.fresh)
            rows[tier]["warm_s"].append(warm)
            rows[tier]["fresh_s"].append(fresh)
        for tier, value in _reads(args.reads).items():
            rows[tier]["read_s"].append(value)
    med = {t: {k: statistics.median(v) for k, v in d.items()} for t, d in rows.items()}
    import psutil

    import trainguard

    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "psutil": psutil.__version__,
        "trainguard": trainguard.__version__,
        "platform": platform.platform(),
        "args": vars(args),
        "median": med,
        "ratio_portable_over_linux": {k: med["portable"][k] / med["auto"][k] for k in med["auto"]},
        "rounds": rows,
    }
    out = HERE / "results" / "tier_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"{'':24}{'Linux tier':>14}{'portable':>14}{'ratio':>8}")
    labels = {
        "warm_s": "per trial, warm worker",
        "fresh_s": "per trial, fresh worker",
        "read_s": "one tree reading",
    }
    for key, label in labels.items():
        a, b = med["auto"][key], med["portable"][key]
        unit, scale = ("ms", 1e3) if key != "read_s" else ("us", 1e6)
        print(f"{label:24}{a * scale:>11.2f} {unit}{b * scale:>11.2f} {unit}{b / a:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
