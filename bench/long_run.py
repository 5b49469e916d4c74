"""Benchmark: does a run get slower as it gets longer? Trials per second over one long run, and
``trainguard report``'s peak memory and time at 1,000, 10,000 and 100,000 trials.

    .venv/bin/python bench/long_run.py                    # 1,000 + 10,000 + 100,000 trials (~10-15 min)
    .venv/bin/python bench/long_run.py --sizes 1000 10000  # shorter

Each size is one real run: ``Runner(workers=1)`` (one worker serves every trial, so its history
grows the whole run) over tiny trials that return at once, through the real supervisor, worker
and SQLite store; trials per second are counted from the results' arrival times over the first
and the last thousand. Then ``trainguard report`` renders the run in a child process whose peak
RSS (getrusage of the child) and wall time are read. Last, the recycle decision itself is timed
at 100, 15,000 and 100,000 trials of history (the 15,000 case cost 10.5 ms before the history
was bounded). Writes bench/results/long_run.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRIAL = HERE / "long_run_trial.py"


def one_run(folder: Path, trials: int) -> dict[str, object]:
    from trainguard import Runner

    store = folder / f"run-{trials}.db"
    arrivals: list[float] = []
    start = time.perf_counter()
    with Runner(workers=1, store=store) as runner:
        for _ in runner.imap(f"{TRIAL}:tiny", [{"i": i} for i in range(trials)], name=f"long-{trials}"):
            arrivals.append(time.perf_counter())
    wall = time.perf_counter() - start
    k = min(1000, trials // 2)  # a 1,000-trial run: its first and last 500
    first = (k - 1) / (arrivals[k - 1] - arrivals[0])
    last = (k - 1) / (arrivals[-1] - arrivals[-k])
    report = folder / f"run-{trials}.html"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "report",
            f"long-{trials}",
            "--store",
            str(store),
            "-o",
            str(report),
        ],
        check=True,
        capture_output=True,
    )
    report_s = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "trials": trials,
        "wall_s": round(wall, 1),
        "first_1000_per_s": round(first, 1),
        "last_1000_per_s": round(last, 1),
        "report_s": round(report_s, 2),
        # ru_maxrss of children is the largest child so far; runs go smallest first, so it is this one's
        "report_peak_mib": round(peak_kib / 1024, 1) if peak_kib > before else None,
        "report_bytes": report.stat().st_size,
    }


def decision_cost() -> dict[str, float]:
    from trainguard.runner.policy import Policy, WorkerHistory, decide_recycle

    try:
        from trainguard.runner.policy import worker_history
    except ImportError:  # a tree from before the bounded history: the supervisor passed it all

        def worker_history(n, rss, peaks, supervisor_rss_bytes=0):  # type: ignore[no-redef]
            return WorkerHistory(n, tuple(rss), tuple(peaks), supervisor_rss_bytes)

    policy = Policy(memory_limit="8GB", peak_ratio=1.5)
    out = {}
    for n in (100, 15_000, 100_000):
        rss = [400 * 2**20 + 100 * i for i in range(n)]
        peaks = [r + 50 * 2**20 for r in rss]
        reps = 200
        t0 = time.perf_counter()
        for _ in range(reps):
            decide_recycle(policy, worker_history(n, rss, peaks))
        out[str(n)] = round((time.perf_counter() - t0) / reps * 1000, 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--out", default=str(HERE / "results" / "long_run.json"))
    args = parser.parse_args()
    import trainguard

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sorted(args.sizes):
            row = one_run(Path(tmp), n)
            print(json.dumps(row), flush=True)
            rows.append(row)
    cost = decision_cost()
    print("decide_recycle ms per call by history length:", cost)
    result = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "trainguard": trainguard.__version__,
        "cpus": os.cpu_count(),
        "load_1m": os.getloadavg()[0],
        "runs": rows,
        "decide_recycle_ms": cost,
    }
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
