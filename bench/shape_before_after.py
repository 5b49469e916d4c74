"""Two source trees side by side on the Runner's three paths that a change of shape could slow.

    git worktree add /tmp/before <commit>       # the tree before the change
    .venv/bin/python bench/shape_before_after.py --before /tmp/before/src --rounds 3   # about 6 minutes

Each round runs, for each tree in turn (the order alternates round by round, so neither always runs on
a warmer machine), a fresh interpreter with that tree first on ``PYTHONPATH`` which measures:

- **dispatch**: ``--tiny`` trials that return at once through one ``map`` of one worker, timed after a
  first ``map`` has started the worker: what the supervisor spends per trial (queue, dispatch,
  result, store rows);
- **1 worker**: ``--fits`` of ``trainguard.workloads.keras_fit`` (the seed's Keras model) through a
  Runner with one worker, its TensorFlow import included, as a user pays it;
- **2 workers**: the same fits through two workers.

It prints a table of medians and the after/before ratio of each, and writes the rows as JSON.
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = ("dispatch_ms_per_trial", "one_worker_s", "two_workers_s")


def noop_trial(params):
    """A trial that does nothing: its wall is the supervisor's per-trial cost."""
    return params["i"]


def measure(tiny: int, fits: int) -> dict[str, float]:
    """One tree's three figures, in this interpreter (``PYTHONPATH`` chose the tree)."""
    from trainguard import Runner
    from trainguard.workloads import keras_fit

    fn = f"{Path(__file__).resolve()}:noop_trial"
    with tempfile.TemporaryDirectory() as tmp:
        with Runner(workers=1, store=f"{tmp}/t.db") as runner:
            runner.map(fn, [{"i": -1}], name="warm")
            t0 = time.perf_counter()
            done = runner.map(fn, [{"i": i} for i in range(tiny)], name="tiny")
            dispatch = 1000 * (time.perf_counter() - t0) / tiny
        assert all(r.ok for r in done)
        walls = []
        for workers in (1, 2):
            t0 = time.perf_counter()
            with Runner(workers=workers, store=f"{tmp}/k{workers}.db", keras_backend="tensorflow") as runner:
                fitted = runner.map(keras_fit, [{} for _ in range(fits)], name=f"keras{workers}")
            walls.append(time.perf_counter() - t0)
            assert all(r.ok for r in fitted)
    return {
        "dispatch_ms_per_trial": round(dispatch, 3),
        "one_worker_s": round(walls[0], 2),
        "two_workers_s": round(walls[1], 2),
    }


def run_tree(src: str, tiny: int, fits: int) -> dict[str, float]:
    """The three figures of one tree, in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [sys.executable, __file__, "--child", "--tiny", str(tiny), "--fits", str(fits)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the run on {src} failed: {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: dict[str, list[dict[str, float]]], before: str, after: str) -> list[str]:
    """Markdown rows: each case's medians and every run, and after/before."""
    lines = ["| case | before (median) | after (median) | after / before | runs before | runs after |"]
    lines.append("| --- | ---: | ---: | ---: | --- | --- |")
    for case in CASES:
        b = [r[case] for r in rows[before]]
        a = [r[case] for r in rows[after]]
        mb, ma = statistics.median(b), statistics.median(a)
        lines.append(
            f"| {case} | {mb:g} | {ma:g} | {ma / mb:.2f} | {', '.join(map(str, b))} | {', '.join(map(str, a))} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the src/ folder of the tree before (e.g. /tmp/before/src)")
    parser.add_argument(
        "--after", default=str(HERE.parent / "src"), help="the src/ folder after (this tree's)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", type=int, default=300, help="tiny trials for the dispatch figure")
    parser.add_argument("--fits", type=int, default=8, help="Keras fits for the 1- and 2-worker figures")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(HERE / "results" / "shape_before_after.json"))
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.tiny, args.fits)))
        return 0
    if not args.before or not Path(args.before, "trainguard").is_dir():
        parser.error("--before must name the src/ folder of another checkout (one that holds trainguard/)")
    if args.rounds < 1 or args.tiny < 10 or args.fits < 2:
        parser.error("--rounds must be >= 1, --tiny >= 10 and --fits >= 2")
    rows: dict[str, list[dict[str, float]]] = {args.before: [], args.after: []}
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for i in range(args.rounds):
        order = (args.before, args.after) if i % 2 == 0 else (args.after, args.before)
        for src in order:
            rows[src].append(run_tree(src, args.tiny, args.fits))
            print(f"round {i + 1} {src}: {rows[src][-1]}  load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    lines = table(rows, args.before, args.after)
    print("\n".join(lines))
    meta = {
        "started": started,
        "python": platform.python_version(),
        "before": args.before,
        "after": args.after,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
