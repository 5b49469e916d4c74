"""Benchmark: CPU the supervisor itself uses while it watches one worker (sampling at 10 Hz).

    .venv/bin/python bench/supervisor_overhead.py            # ~45 s
    .venv/bin/python bench/supervisor_overhead.py --seconds 5
    .venv/bin/python bench/supervisor_overhead.py --per-trial-only --src-a OLD/src --src-b src

The last form measures only the per-trial cost (``--trials`` tiny trials through one ``map``, worker
start included) and, given two source trees, alternates between them in fresh interpreters so that
both are measured side by side on the same (noisy) machine.

The trials only sleep, so nearly all CPU the supervisor process uses (all its threads: the loop,
the sampler, store writes) is overhead. Measured with getrusage(RUSAGE_SELF), which excludes the
worker processes. Cases: a bare worker; a worker holding 64 threads and one child process (what a
TensorFlow worker looks like to /proc); and sampling with USS. The goal is <= 2 % of one core at
10 Hz with one worker. Writes bench/results/supervisor_overhead.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def busy_tree_trial(params):
    """Sleep in a worker that holds many threads and a child process, like a TF worker."""
    import subprocess
    import sys as _sys
    import threading
    import time as _time

    holder = _sys.modules[__name__] if __name__ in _sys.modules else None
    state = getattr(holder, "_state", None) if holder else None
    if state is None:
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait, daemon=True) for _ in range(64)]
        for t in threads:
            t.start()
        child = subprocess.Popen([_sys.executable, "-c", "import time; time.sleep(3600)"])
        state = (stop, threads, child)
        if holder is not None:
            holder._state = state
    _time.sleep(params["sleep_s"])
    return {"threads": threading.active_count()}


def sleep_trial(params):
    import time as _time

    _time.sleep(params["sleep_s"])
    return {}


def noop_trial(params):
    return params["i"]


def per_trial(trials: int, store: str) -> dict:
    """Wall and supervisor CPU per tiny trial: one ``map`` of ``trials`` trials (worker start included)."""
    from trainguard.runner import Policy, Runner

    fn = f"{Path(__file__).resolve()}:noop_trial"
    with Runner(workers=1, store=store, policy=Policy()) as runner:
        c0, t0 = cpu_s(), time.perf_counter()
        results = runner.map(fn, [{"i": i} for i in range(trials)], name=f"tiny-{time.time()}")
        c1, t1 = cpu_s(), time.perf_counter()
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    return {
        "case": f"{trials} tiny trials",
        "trials": trials,
        "wall_s": round(t1 - t0, 3),
        "ms_per_trial": round(1000 * (t1 - t0) / trials, 3),
        "supervisor_cpu_ms_per_trial": round(1000 * (c1 - c0) / trials, 3),
    }


def side_by_side(src_a: str, src_b: str, trials: int, rounds: int) -> int:
    """Alternate fresh interpreters on two source trees; print the median per-trial figures."""
    import os
    import statistics
    import subprocess

    out: dict[str, list[dict]] = {src_a: [], src_b: []}
    for _ in range(rounds):
        for src in (src_a, src_b):
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            proc = subprocess.run(
                [sys.executable, __file__, "--per-trial-only", "--trials", str(trials), "--json-line"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            out[src].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"| source | ms per trial (median of {rounds}) | supervisor CPU ms per trial | runs (ms/trial) |")
    print("| --- | ---: | ---: | --- |")
    for src, rows in out.items():
        ms = statistics.median(r["ms_per_trial"] for r in rows)
        cpu = statistics.median(r["supervisor_cpu_ms_per_trial"] for r in rows)
        each = ", ".join(f"{r['ms_per_trial']:.2f}" for r in rows)
        print(f"| {src} | {ms:.2f} | {cpu:.2f} | {each} |")
    return 0


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def measure(label: str, fn, seconds: float, *, interval: str, uss: bool, store: str) -> dict:
    from trainguard.runner import Policy, Runner

    trial_s = 0.5
    n = max(2, int(seconds / trial_s))
    with Runner(workers=1, store=store, policy=Policy(), sample_interval=interval, uss=uss) as runner:
        # the first trial starts the worker; measure steady state from the second on
        runner.map(fn, [{"sleep_s": 0.01}], name=f"{label}-warm-{time.time()}")
        c0, t0 = cpu_s(), time.perf_counter()
        results = runner.map(fn, [{"sleep_s": trial_s}] * n, name=f"{label}-{time.time()}")
        c1, t1 = cpu_s(), time.perf_counter()
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    wall = t1 - t0
    return {
        "case": label,
        "interval": interval,
        "uss": uss,
        "trials": n,
        "wall_s": round(wall, 2),
        "supervisor_cpu_s": round(c1 - c0, 3),
        "percent_of_core": round(100 * (c1 - c0) / wall, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="seconds per case (default 12)")
    parser.add_argument("--out", default=str(HERE / "results" / "supervisor_overhead.json"))
    parser.add_argument(
        "--trials", type=int, default=500, help="tiny trials for the per-trial case (default 500)"
    )
    parser.add_argument("--per-trial-only", action="store_true", help="measure only the per-trial cost")
    parser.add_argument("--src-a", help="with --src-b: compare two source trees side by side")
    parser.add_argument("--src-b")
    parser.add_argument("--rounds", type=int, default=5, help="alternations for --src-a/--src-b (default 5)")
    parser.add_argument("--json-line", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.src_a and args.src_b:
        return side_by_side(args.src_a, args.src_b, args.trials, args.rounds)
    if args.per_trial_only:
        with tempfile.TemporaryDirectory() as tmp:
            row = per_trial(args.trials, str(Path(tmp) / "tiny.db"))
        print(json.dumps(row) if args.json_line else row)
        return 0
    import trainguard

    fn_bare = f"{Path(__file__).resolve()}:sleep_trial"
    fn_tree = f"{Path(__file__).resolve()}:busy_tree_trial"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "overhead.db")
        rows.append(measure("bare worker", fn_bare, args.seconds, interval="100ms", uss=False, store=store))
        rows.append(
            measure("64 threads + child", fn_tree, args.seconds, interval="100ms", uss=False, store=store)
        )
        rows.append(
            measure("64 threads + child, USS", fn_tree, args.seconds, interval="100ms", uss=True, store=store)
        )
        tiny = per_trial(args.trials, str(Path(tmp) / "tiny.db"))
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "trainguard": trainguard.__version__,
        "platform": platform.platform(),
    }
    print(
        f"Supervisor overhead, 1 worker, sampling at 10 Hz ({meta['date']}, Python {meta['python']}, trainguard {meta['trainguard']})\n"
    )
    print("| case | trials | wall s | supervisor CPU s | % of one core | goal |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        goal = "<= 2 %" if not r["uss"] else "(USS on request)"
        print(
            f"| {r['case']} | {r['trials']} | {r['wall_s']} | {r['supervisor_cpu_s']} | {r['percent_of_core']} % | {goal} |"
        )
    print(
        f"\nPer-trial cost: {tiny['trials']} tiny trials in one map (worker start included): "
        f"{tiny['ms_per_trial']} ms a trial, supervisor CPU {tiny['supervisor_cpu_ms_per_trial']} ms a trial"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows, "per_trial": tiny}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
