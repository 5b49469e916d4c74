"""Benchmark: what a fresh worker costs, each trial in a new worker process.

    .venv/bin/python bench/worker_start.py                                 # ~1 min
    .venv/bin/python bench/worker_start.py --src-a OLD/src --src-b src     # two trees side by side

A run that recycles its workers often (``max_trials_per_worker=1``, a memory kill, a recycle for
growth, an out-of-memory retry) pays a worker start per trial. Each case runs ``--trials`` no-op
trials, one fresh worker each, in a fresh interpreter, and the cases alternate for ``--rounds``
rounds: trainguard's Runner (``Policy(max_trials_per_worker=1)``) with the tree(s) given, and what a
user would write instead, ``concurrent.futures.ProcessPoolExecutor`` (spawn,
``max_tasks_per_child=1``), which supervises nothing. Reported: wall per trial, the workers' CPU per
trial (``getrusage(RUSAGE_CHILDREN)``) and the driver's; the median of the rounds. Writes
bench/results/worker_start.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_CHILD = r"""
import json, os, resource, sys, tempfile, time
kind, n, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def usage():
    c, s = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return c.ru_utime + c.ru_stime, s.ru_utime + s.ru_stime

if kind == "trainguard":
    sys.path.insert(0, src)
    os.environ["PYTHONPATH"] = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    import trainguard
    assert trainguard.__file__.startswith(src), trainguard.__file__
    folder = tempfile.mkdtemp()
    runner = trainguard.Runner(workers=1, policy=trainguard.Policy(max_trials_per_worker=1), store=folder + "/s.db")
    c0, s0 = usage(); t0 = time.perf_counter()
    results = runner.map("builtins:len", [{"i": i} for i in range(n)], name="starts")
    wall = time.perf_counter() - t0
    assert all(r.status == "ok" for r in results), results[0].error
else:
    import concurrent.futures as cf, multiprocessing as mp
    c0, s0 = usage(); t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), max_tasks_per_child=1) as pool:
        list(pool.map(len, [{"i": i} for i in range(n)]))
    wall = time.perf_counter() - t0
c1, s1 = usage()
print(json.dumps({"wall_ms": wall / n * 1e3, "workers_cpu_ms": (c1 - c0) / n * 1e3, "driver_cpu_ms": (s1 - s0) / n * 1e3}))
"""


def _one(kind: str, trials: int, src: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, str(trials), src],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trials", type=int, default=30, help="trials a case, each in a fresh worker (default 30)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the cases (default 3)")
    parser.add_argument("--src-a", help="a second source tree, measured beside --src-b")
    parser.add_argument(
        "--src-b", default=str(ROOT / "src"), help="the tree measured (default: this checkout's)"
    )
    parser.add_argument("--out", default=str(HERE / "results" / "worker_start.json"))
    args = parser.parse_args(argv)
    cases = [("trainguard", "B", args.src_b), ("executor", "-", "")]
    if args.src_a:
        cases.insert(0, ("trainguard", "A", args.src_a))
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for kind, tree, src in cases:
            runs.setdefault(f"{kind} {tree}", []).append(_one(kind, args.trials, src))
    table = {
        case: {k: statistics.median(r[k] for r in rs) for k in rs[0]} | {"runs": rs}
        for case, rs in runs.items()
    }
    base = table["executor -"]["wall_ms"]
    print(
        f"{'case':<14} {'wall ms/trial':>14} {'workers CPU ms':>15} {'driver CPU ms':>14} {'wall / executor':>16}"
    )
    for case, row in table.items():
        print(
            f"{case:<14} {row['wall_ms']:>14.0f} {row['workers_cpu_ms']:>15.0f} {row['driver_cpu_ms']:>14.0f} "
            f"{row['wall_ms'] / base:>16.2f}"
        )
    record = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="minutes"),
        "python": platform.python_version(),
        "load": os.getloadavg(),
        "trials": args.trials,
        "rounds": args.rounds,
        "trees": {"A": args.src_a, "B": args.src_b},
        "cases": table,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
