"""Benchmark: many Keras fits naively, under trainguard's Runner, and under the alternatives people use.

    .venv/bin/python bench/runner_bench.py              # 40 trials, as the issue asks (about 10 minutes)
    .venv/bin/python bench/runner_bench.py --quick      # 8 trials, for development

Every configuration runs ``trainguard.workloads.keras_fit`` with its defaults on the TensorFlow
backend, in this one run, one after the other (never concurrently), and every memory figure is
sampled from outside the processes at 10 Hz (RSS summed over the process tree):

  (a) naive loop in one process, clear_session() + gc.collect() after each trial
  (b) trainguard Runner, 1 worker, default policy
  (c) ProcessPoolExecutor(max_workers=1, max_tasks_per_child=1, mp_context=spawn): a process per trial
  (d) Optuna, one process, the same trials as an objective (if optuna is installed)
  (e) trainguard Runner, 2 workers
  (f) memory-limit kill overshoot: a trial allocating 50 MB every 20 ms under memory_limit=600MB

It prints a markdown table of ratios against (a) plus the versions and date, and writes the raw
figures to bench/results/runner_bench.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 2**20
HERE = Path(__file__).resolve().parent


# -- trial functions (module level so spawned processes can import them) ---------------------------


def timed_keras_fit(params: dict[str, Any]) -> dict[str, Any]:
    """keras_fit plus its wall-clock window, so the outside sampler can find the trial's peak."""
    from trainguard.workloads import keras_fit

    start = time.time()
    value = keras_fit(params)
    return {"start": start, "end": time.time(), "value": value}


def memory_hog(params: dict[str, Any]) -> int:
    """Allocate ``chunk_mb`` MB every ``every_s`` seconds (pages touched) until ``max_mb``."""
    chunk = int(params.get("chunk_mb", 50)) * 1_000_000
    every_s = float(params.get("every_s", 0.02))
    held = []
    while len(held) * chunk < int(params.get("max_mb", 8000)) * 1_000_000:
        held.append(bytearray(b"\x01") * chunk)  # repetition writes every page, unlike bytearray(n)
        time.sleep(every_s)
    return len(held)


def _optuna_child() -> None:
    """The (d) child: an Optuna study whose objective is one fit; prints one marked line per trial."""
    import optuna
    import psutil

    from trainguard.demo import trial_line
    from trainguard.workloads import keras_fit

    spec = json.loads(sys.argv[2])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proc = psutil.Process()
    import keras  # noqa: F401 - start-up outside the first trial, as in the naive child

    def objective(trial: optuna.Trial) -> float:
        start = time.time()
        value = keras_fit(spec["params"])
        print(trial_line(trial.number, start, time.time(), proc.memory_info().rss, value), flush=True)
        return value["loss"]

    optuna.create_study(direction="minimize").optimize(objective, n_trials=spec["trials"])
    sys.stdout.flush()
    os._exit(0)


# -- configurations --------------------------------------------------------------------------------


def _half_to_row(half: Any, label: str) -> dict[str, Any]:
    return {
        "config": label,
        "wall_s": half.wall_s,
        "peak_rss_bytes": half.peak_rss_bytes,
        "growth_bytes_per_trial": half.growth_bytes_per_trial,
        "trial_peak_rss_bytes": list(half.trial_peak_rss_bytes),
        "recycles": half.recycles,
        "workers_started": half.workers_started,
        "failed": half.failed,
    }


def bench_naive(trials: int) -> dict[str, Any]:
    from trainguard.demo import run_naive

    return _half_to_row(run_naive(trials), "(a) naive loop, 1 process")


def bench_runner(trials: int, workers: int, store: str) -> dict[str, Any]:
    from trainguard.demo import run_with_runner

    half = run_with_runner(trials, store=store, workers=workers, name=f"bench-{workers}w-{os.getpid()}")
    return _half_to_row(
        half, f"({'b' if workers == 1 else 'e'}) trainguard Runner, {workers} worker{'s' * (workers > 1)}"
    )


def bench_pool(trials: int, per_trial_timeout_s: float = 180.0) -> dict[str, Any]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    import psutil

    from trainguard.demo import TreeSampler, theil_sen_slope
    from trainguard.probes.host import tree_memory

    me = os.getpid()
    os.environ["KERAS_BACKEND"] = "tensorflow"  # inherited by the spawned children
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows: list[dict[str, Any]] = []
    hung = False
    t0 = time.time()
    with TreeSampler(lambda: tree_memory(me).children_rss_bytes or None, interval_s=0.1) as sampler:
        pool = ProcessPoolExecutor(
            max_workers=1, max_tasks_per_child=1, mp_context=multiprocessing.get_context("spawn")
        )
        try:
            futures = [pool.submit(timed_keras_fit, {}) for _ in range(trials)]
            for future in futures:
                rows.append(future.result(timeout=per_trial_timeout_s))
        except FutureTimeout:
            hung = True  # gh-115634: the executor may not replace a retired worker
        finally:
            if hung:
                for child in psutil.Process(me).children(recursive=True):
                    child.kill()
                pool.shutdown(wait=False, cancel_futures=True)
            else:
                pool.shutdown(wait=True)
    wall_s = time.time() - t0
    peaks = [sampler.peak_between(r["start"], r["end"]) for r in rows]
    return {
        "config": "(c) ProcessPoolExecutor, max_tasks_per_child=1, spawn",
        "wall_s": wall_s,
        "peak_rss_bytes": sampler.peak_rss_bytes,
        "growth_bytes_per_trial": theil_sen_slope(peaks[1:]),
        "trial_peak_rss_bytes": peaks,
        "recycles": max(0, len(rows) - 1),
        "workers_started": len(rows) + (1 if hung else 0),
        "failed": trials - len(rows),
        "hung": hung,
    }


def bench_optuna(trials: int) -> dict[str, Any] | None:
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        return None
    from trainguard.demo import run_measured_child

    spec = json.dumps({"trials": trials, "params": {}})
    half = run_measured_child(
        [sys.executable, str(Path(__file__).resolve()), "--optuna-child", spec], trials, mode="optuna"
    )
    return _half_to_row(half, "(d) Optuna study, 1 process")


def bench_overshoot(store: str, kills: int = 3) -> dict[str, Any]:
    """Kill overshoot: RSS at the kill minus the limit, from the Runner's record and a 200 Hz outside sampler."""
    from trainguard.demo import TreeSampler
    from trainguard.probes.host import tree_memory
    from trainguard.runner import Policy, Runner
    from trainguard.store import Store
    from trainguard.units import parse_size

    limit = parse_size("600MB")
    me = os.getpid()
    name = f"bench-overshoot-{os.getpid()}"
    t0 = time.time()
    with TreeSampler(lambda: tree_memory(me).children_rss_bytes or None, interval_s=0.005) as sampler:
        with Runner(workers=1, policy=Policy(memory_limit="600MB", retries=0), store=store) as runner:
            results = runner.map(
                f"{Path(__file__).resolve()}:memory_hog", [{} for _ in range(kills)], name=name
            )
    wall_s = time.time() - t0
    with Store(store, readonly=True) as reader:
        run = reader.get_run(name)
        workers = reader.workers(run.run_id)
        attempts = reader.attempts(run.run_id)
    recorded = []
    for w in workers:
        detail = w.detail or {}
        if w.reason == "killed_memory" and isinstance(detail.get("rss_bytes"), int):
            recorded.append(detail["rss_bytes"])
    if not recorded:  # fall back to the attempts' peaks if the worker detail has no reading
        recorded = [a.peak_rss_bytes for a in attempts if a.status == "killed_memory" and a.peak_rss_bytes]
    overs = [r - limit for r in recorded]
    return {
        "config": "(f) kill overshoot, 50 MB / 20 ms under memory_limit=600MB",
        "limit_bytes": limit,
        "kills": sum(r.status == "failed" for r in results),
        "statuses": [r.status for r in results],
        "errors": [r.error for r in results],
        "rss_at_kill_bytes": recorded,
        "overshoot_bytes": overs,
        "overshoot_median_bytes": statistics.median(overs) if overs else None,
        "overshoot_max_bytes": max(overs) if overs else None,
        "outside_200hz_peak_bytes": sampler.peak_rss_bytes,
        "outside_200hz_overshoot_bytes": sampler.peak_rss_bytes - limit,
        "wall_s": wall_s,
    }


# -- report ----------------------------------------------------------------------------------------


def _fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def render(results: dict[str, Any]) -> str:
    rows = results["configs"]
    naive = rows[0]
    single = results["single_trial_peak_bytes"]
    lines = [
        f"trainguard runner benchmark, {results['trials']} x keras_fit (defaults, TF backend), {results['date']}",
        "",
        "| configuration | wall s | wall / naive | peak RSS MiB | peak / naive | peak / single trial | growth MiB/trial | workers (recycled) | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        growth = row["growth_bytes_per_trial"]
        note = " (hung: gh-115634)" if row.get("hung") else ""
        lines.append(
            f"| {row['config']}{note} | {row['wall_s']:.1f} | {_fmt_ratio(row['wall_s'], naive['wall_s'])} | "
            f"{row['peak_rss_bytes'] / MIB:.0f} | {_fmt_ratio(row['peak_rss_bytes'], naive['peak_rss_bytes'])} | "
            f"{_fmt_ratio(row['peak_rss_bytes'], single)} | {'-' if growth is None else f'{growth / MIB:+.1f}'} | "
            f"{row.get('workers_started', 1) or 1} ({row.get('recycles', 0)}) | {row['failed']} |"
        )
    lines.append("")
    lines.append(f"single-trial peak (trial 0 of the naive loop, a fresh process): {single / MIB:.0f} MiB")
    by = {r["config"][:3]: r for r in rows}
    if "(b)" in by:
        b = by["(b)"]
        checks = [
            ("Runner peak <= 1.25 x single-trial peak", b["peak_rss_bytes"] / single, 1.25),
            ("Runner wall <= 1.10 x naive wall", b["wall_s"] / naive["wall_s"], 1.10),
        ]
        if "(c)" in by:
            checks.append(
                ("Runner faster than ProcessPoolExecutor (ratio < 1)", b["wall_s"] / by["(c)"]["wall_s"], 1.0)
            )
        for label, value, target in checks:
            lines.append(f"- {label}: {value:.2f} -> {'met' if value <= target else 'MISSED'}")
    over = results.get("overshoot")
    if over:
        if over["overshoot_median_bytes"] is not None:
            lines.append(
                f"- kill overshoot at memory_limit=600MB, 50 MB/20 ms: median {over['overshoot_median_bytes'] / MIB:+.0f} MiB, "
                f"max {over['overshoot_max_bytes'] / MIB:+.0f} MiB over {len(over['overshoot_bytes'])} kills "
                f"(Runner's reading at the kill); outside 200 Hz sampler peak {over['outside_200hz_overshoot_bytes'] / MIB:+.0f} MiB"
            )
        else:
            lines.append(f"- kill overshoot: no kill recorded (statuses {over['statuses']})")
    for failure in results.get("failures", []):
        lines.append(f"- {failure['config']} FAILED: {failure['error']}")
    lines.append("")
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    lines.append(f"command: {results['command']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=None, help="trials per configuration (default 40; --quick 8)"
    )
    parser.add_argument("--quick", action="store_true", help="8 trials, for development")
    parser.add_argument(
        "--only", default="abcdef", help="which configurations to run, e.g. 'ab' (default abcdef)"
    )
    parser.add_argument(
        "--out", default=str(HERE / "results" / "runner_bench.json"), help="where to write the JSON"
    )
    args = parser.parse_args(argv)
    trials = args.trials or (8 if args.quick else 40)
    if trials < 2:
        parser.error("--trials must be >= 2")
    only = set(args.only)
    if "a" not in only:
        parser.error("--only must include 'a': every ratio is against the naive loop")
    from importlib import metadata

    from trainguard.demo import versions

    store = os.path.join(tempfile.mkdtemp(prefix="trainguard-bench-"), "bench.db")
    configs: list[dict[str, Any]] = []

    failures: list[dict[str, str]] = []

    def step(label: str, fn, *fn_args):
        print(f"[{time.strftime('%H:%M:%S')}] {label} ...", file=sys.stderr, flush=True)
        try:
            value = fn(*fn_args)
        except Exception as err:  # noqa: BLE001 - one broken configuration must not lose the others
            import traceback

            traceback.print_exc()
            failures.append({"config": label, "error": f"{type(err).__name__}: {err}"})
            if label.startswith("(a)"):
                raise
            return None
        if value is not None:
            print(
                f"    {json.dumps({k: v for k, v in value.items() if k != 'trial_peak_rss_bytes'})[:300]}",
                file=sys.stderr,
                flush=True,
            )
        return value

    configs.append(step("(a) naive", bench_naive, trials))
    for key, label, fn, fn_args in [
        ("b", "(b) Runner 1 worker", bench_runner, (trials, 1, store)),
        ("c", "(c) ProcessPoolExecutor", bench_pool, (trials,)),
    ]:
        if key in only and (row := step(label, fn, *fn_args)) is not None:
            configs.append(row)
    if "d" in only:
        row = step("(d) Optuna", bench_optuna, trials)
        if row:
            configs.append(row)
    if "e" in only and (row := step("(e) Runner 2 workers", bench_runner, trials, 2, store)) is not None:
        configs.append(row)
    overshoot = (
        step("(f) kill overshoot", bench_overshoot, store, 2 if args.quick else 3) if "f" in only else None
    )
    vers = versions()
    try:
        vers["optuna"] = metadata.version("optuna")
    except metadata.PackageNotFoundError:
        pass
    results = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "trials": trials,
        "command": " ".join(
            [".venv/bin/python", "bench/runner_bench.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "versions": vers,
        "single_trial_peak_bytes": configs[0]["trial_peak_rss_bytes"][0],
        "configs": configs,
        "overshoot": overshoot,
        "failures": failures,
        "store": store,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(render(results))
    print(f"\nraw results: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--optuna-child":
        _optuna_child()
    sys.exit(main())
