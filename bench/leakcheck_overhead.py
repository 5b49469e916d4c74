"""Overhead of leakcheck on the time of the iterations themselves.

Run: .venv/bin/python bench/leakcheck_overhead.py [--attribution] [--before SRC]
     .venv/bin/python bench/leakcheck_overhead.py --real [--before SRC]

``--attribution`` keeps the censuses on (the default of leakcheck; off by default here, as the
first version of this benchmark measured). ``--before SRC`` runs every row twice, alternating, in
fresh processes: once with PYTHONPATH=SRC (the code before a change) and once with this tree.

For steps of several durations, times a plain loop (per call), then runs
``leakcheck(attribution=False, max_time="8s")`` with ``min_iterations`` above what fits (so it cannot
stop early) and reports its wall time over the same number of plain calls. Setup and process start
are excluded; the default time budget decides the batching, as in real use.

``--real``: a clean run with leakcheck's defaults (censuses on, it stops when it decides), as a user
runs it, on two steps: the corpus's clean Keras fit (``bench/leak_corpus/keras_tf_seed_fit_cleanup.py``,
about 1 s a fit) and a fast plain numpy step (0.5 ms). Each check runs in a fresh process and its
wall time (the report, the holder search included) is set against the same number of plain calls
of the step in another fresh process (the first call, which imports and traces, in both). The
censuses' and the holder search's own time are summed by wrapping ``_evidence.take_counts`` and
``holders.holder_chains``; the check's own time is its wall time less the time inside the step's
calls, as a share of the latter (what the readings, censuses and report add, whatever the load).
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


REAL_STEPS = {
    "keras_fit": "bench/leak_corpus/keras_tf_seed_fit_cleanup.py",
    "fast_0.5ms": None,
}


def real_step(name: str):
    """The step of row ``name``: the corpus file's ``step``, or the 0.5 ms numpy step."""
    path = REAL_STEPS[name]
    if path is None:
        return make_step(0.0005)
    import importlib.util

    spec = importlib.util.spec_from_file_location("real_step_case", Path(__file__).parent.parent / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.step


def real_check(name: str) -> dict:
    """A clean run of leakcheck's defaults on row ``name``, with its census and holder time."""
    from trainguard.leaks import _evidence, holders

    spent = {"census_s": 0.0, "holders_s": 0.0, "holder_searches": 0}

    def timed(fn, key, count=None):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
                if count:
                    spent[count] += 1

        return wrapper

    _evidence.take_counts = timed(_evidence.take_counts, "census_s")
    holders.holder_chains = timed(holders.holder_chains, "holders_s", "holder_searches")
    plain_step = real_step(name)
    in_step = [0.0]

    def step() -> None:
        t0 = time.perf_counter()
        try:
            plain_step()
        finally:
            in_step[0] += time.perf_counter() - t0

    t = time.perf_counter()
    rep = trainguard.leakcheck(step)
    wall = time.perf_counter() - t
    counts = rep.counts or {}
    return {
        "verdict": rep.verdict.value,
        "iterations": rep.iterations,
        "wall_s": wall,
        "in_step_s": in_step[0],
        "own_share": (wall - in_step[0]) / in_step[0],
        "censuses": counts.get("censuses"),
        "census_median_s": counts.get("census_median_s"),
        **spent,
    }


def real_plain(name: str, calls: int) -> dict:
    step = real_step(name)
    t = time.perf_counter()
    for _ in range(calls):
        step()
    return {"plain_s": time.perf_counter() - t}


def real_row(name: str, src: str | None = None) -> dict:
    """Row ``name`` in fresh processes (PYTHONPATH=src when given): the check, then as many plain calls."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if src is not None:
        env["PYTHONPATH"] = src

    def child(*args: str) -> dict:
        cmd = [sys.executable, __file__, *args]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    row = {"step": name, **child("--real-check", name)}
    row.update(child("--real-plain", name, str(row["iterations"])))
    row["ratio"] = row["wall_s"] / row["plain_s"]
    row["census_share"] = row["census_s"] / row["plain_s"]
    row["load1"] = round(os.getloadavg()[0], 2)
    return row


def real(before: str | None) -> None:
    """The ``--real`` rows (both trees side by side with ``before``)."""
    import os

    print("# leakcheck on a clean run, leakcheck's defaults, against plain calls\n")
    print(
        f"{datetime.date.today()}, Python {platform.python_version()}, trainguard {trainguard.__version__}\n"
    )
    print(
        "| step | tree | verdict | calls | plain calls | leakcheck | ratio | check's own time | censuses | census time (share) | holder searches | load |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    rows = []
    for name in REAL_STEPS:
        trees = [("before", before), ("after", os.environ.get("PYTHONPATH", ""))] if before else [("", None)]
        for tree, src in trees:
            r = real_row(name, src) | {"tree": tree}
            rows.append(r)
            print(
                f"| {name} | {tree or '-'} | {r['verdict']} | {r['iterations']} | {r['plain_s']:.2f} s | "
                f"{r['wall_s']:.2f} s | {r['ratio']:.3f} | {r['own_share']:.1%} | {r['censuses']} | {r['census_s']:.2f} s "
                f"({r['census_share']:.1%}) | {r['holder_searches']} ({r['holders_s']:.2f} s) | {r['load1']} |",
                flush=True,
            )
    out = Path(__file__).parent / "results" / "leakcheck_overhead_real.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"date": str(datetime.date.today()), "rows": rows}, indent=1))


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
    ap.add_argument("--real", action="store_true", help="clean runs of a Keras fit and a fast step")
    ap.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--real-check", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--real-plain", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.real_check:
        print(json.dumps(real_check(args.real_check)))
        return
    if args.real_plain:
        print(json.dumps(real_plain(args.real_plain[0], int(args.real_plain[1]))))
        return
    if args.real:
        real(args.before)
        return
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
