"""Benchmark: CPU the supervisor itself uses while it watches one worker (sampling at 10 Hz).

    .venv/bin/python bench/supervisor_overhead.py            # ~45 s
    .venv/bin/python bench/supervisor_overhead.py --seconds 5

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
    args = parser.parse_args(argv)
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
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
