"""Benchmark: many Keras fits naively, under trainguard's Runner, and under the alternatives people use.

    .venv/bin/python bench/runner_bench.py              # 40 trials, as the issue asks (about 13 minutes with Ray Tune)
    .venv/bin/python bench/runner_bench.py --quick      # 8 trials, for development

Every configuration runs ``trainguard.workloads.keras_fit`` with its defaults on the TensorFlow
backend, in this one run, one after the other (never concurrently), and every memory figure is
sampled from outside the processes at 10 Hz (RSS summed over the process tree):

  (a) naive loop in one process, clear_session() + gc.collect() after each trial
  (b) trainguard Runner, 1 worker, default policy
  (c) ProcessPoolExecutor(max_workers=1, max_tasks_per_child=1, mp_context=spawn): a process per trial
  (d) Optuna, one process, the same trials as an objective (if optuna is installed)
  (e) trainguard Runner, 2 workers
  (g) Ray Tune (if ray is installed: pip install -e '.[bench]'): the same trials, one at a time, each
      in a fresh actor process (reuse_actors=False, Tune's default), on a local Ray instance started
      by the benchmark with ray.init(num_cpus=2); its wall time includes importing ray, ray.init and
      ray.shutdown, as a user pays them, and its memory is the whole Ray process tree (driver, GCS,
      raylet, agents, workers). --ray-trials gives it fewer trials (a fresh actor per trial
      costs about 7 s on 2 shared cores); the table then says so
  (f) memory-limit kill overshoot: a trial allocating 50 MB every 20 ms under memory_limit=600MB
  (h) trainguard Runner, workers="auto", memory_budget = 1.6 x the single-trial peak of (a)
  (i) trainguard Runner, workers="auto", memory_budget = 3 x the single-trial peak of (a)
  (k) trainguard Runner, workers="auto", memory_budget = 4.5 x, tf_custom_gradients=False: a workload
      that grows and room for its replacement to start early
  (j) ProcessPoolExecutor(max_workers=2, max_tasks_per_child=1, spawn): two at once, a process per trial
  (l) trainguard Runner, 2 workers, Runner(tf_custom_gradients=False): the same fit left to grow
      (about +10 MiB a fit), so that the recycling of two growing workers is measured too
  (m) the same with Policy(peak_ratio=1.05): what holding two growing workers to 2.1 x one trial
      by recycling alone costs in wall time
  (t) a torch workload (bench/torch_workload.py's torch_fit): naive loop in one process, Runner 1 worker,
      Runner 2 workers (ratios against the torch naive loop)

Issue 15's parts, each short enough for one quiet run:
    .venv/bin/python bench/runner_bench.py --only abelmt   # naive, 1 worker, 2 workers (and growing); torch
    .venv/bin/python bench/runner_bench.py --only ahijk    # naive, budgets 1.6x, 3x, 4.5x, ProcessPool x2
    .venv/bin/python bench/runner_bench.py --only ahg      # naive, budget 1.6x, Ray Tune: one run

Memory basis: "peak RSS" is the RSS summed over every descendant of the benchmark process (plus, for
(g), any process whose command line names the Ray session's temp dir), sampled at 10 Hz; it counts
pages shared between processes once per process, so it overstates a many-process tree such as Ray's.
"peak PSS" is the PSS (shared pages divided among their users) summed over the same processes,
sampled at 5 Hz by a second thread around every configuration but (f): the fair sum across processes.

It prints a markdown table of ratios against (a) plus the versions and date, and writes the raw
figures to bench/results/runner_bench.json.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MIB = 2**20
HERE = Path(__file__).resolve().parent
_RAY_MARK = "TRAINGUARD-RAY "

# Command-line fragments (a Ray session's temp dir) that mark a process as part of the configuration
# being measured even when it is not a descendant of this process.
_EXTRA_MARKERS: list[str] = []
_marked_cache: dict[str, Any] = {"at": 0.0, "pids": set()}
# pids measured only because they named a marker (not descendants): shows whether the scan matters
_outside_tree: dict[int, str] = {}


def _measured_processes() -> list[Any]:
    """Descendants of this process plus (re-scanned once a second) processes naming a marker."""
    import psutil

    me = psutil.Process()
    procs = {p.pid: p for p in me.children(recursive=True)}
    if _EXTRA_MARKERS:
        now = time.time()
        if now - _marked_cache["at"] >= 1.0:
            found = set()
            for p in psutil.process_iter(["cmdline"]):
                cmdline = " ".join(p.info["cmdline"] or ())
                if p.pid != me.pid and any(m in cmdline for m in _EXTRA_MARKERS):
                    found.add(p.pid)
            _marked_cache.update(at=now, pids=found)
        for pid in _marked_cache["pids"]:
            if pid not in procs:
                try:
                    proc = procs[pid] = psutil.Process(pid)
                    # children() can miss a process that is starting; only a non-descendant counts
                    if me.pid not in {parent.pid for parent in proc.parents()}:
                        _outside_tree[pid] = " ".join(proc.cmdline())[:200]
                except psutil.Error:
                    pass
    return list(procs.values())


def _sum_memory(kind: str) -> tuple[int, int] | None:
    """(sum of ``kind`` = "rss" or "pss" bytes, process count) over :func:`_measured_processes`."""
    import psutil

    total = count = 0
    for proc in _measured_processes():
        try:
            total += proc.memory_info().rss if kind == "rss" else proc.memory_full_info().pss
            count += 1
        except psutil.Error:  # exited between listing and reading, or not ours to read
            continue
    return (total, count) if count else None


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


def ray_keras_trial(config: dict[str, Any]) -> None:
    """The (g) trainable: one fit, reported to Tune with its window and the actor's pid and RSS."""
    import psutil
    from ray import tune

    out = timed_keras_fit(config["params"])
    tune.report(
        {
            "start": out["start"],
            "end": out["end"],
            "pid": os.getpid(),
            "rss_after_bytes": psutil.Process().memory_info().rss,
            "loss": out["value"]["loss"],
        }
    )


def _ray_child() -> None:
    """The (g) child: ray.init, a Tune run of the trials one at a time, ray.shutdown; marked lines out."""
    import resource

    spec = json.loads(sys.argv[2])
    t0 = time.time()
    import ray
    from ray import tune

    from trainguard._measured_loop import trial_line

    t_import = time.time()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=spec["ray_temp_dir"],
        runtime_env={"env_vars": {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}},
    )
    t_init = time.time()
    tuner = tune.Tuner(
        tune.with_resources(ray_keras_trial, {"cpu": 2}),
        param_space={"params": spec["params"]},
        tune_config=tune.TuneConfig(num_samples=spec["trials"], max_concurrent_trials=1),
        run_config=tune.RunConfig(name="runner-bench", storage_path=spec["storage_path"], verbose=0),
    )
    grid = tuner.fit()
    t_fit = time.time()
    done = sorted(
        (r.metrics for r in grid if r.error is None and "start" in r.metrics), key=lambda m: m["start"]
    )
    for index, m in enumerate(done):
        value = {"loss": m["loss"], "pid": m["pid"]}
        print(trial_line(index, m["start"], m["end"], m["rss_after_bytes"], value), flush=True)
    errors = [f"{type(r.error).__name__}: {r.error}"[:300] for r in grid if r.error is not None]
    ray.shutdown()
    phases = {
        "event": "phases",
        "import_s": t_import - t0,
        "init_s": t_init - t_import,
        "fit_s": t_fit - t_init,
        "shutdown_s": time.time() - t_fit,
        "errors": errors,
        # the driver (Tune's controller lives here) is part of what the tree sum counts
        "driver_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(_RAY_MARK + json.dumps(phases), flush=True)
    sys.stdout.flush()
    os._exit(0)


def _torch_child() -> None:
    """The torch naive loop's child: torch_fit in a loop in one process, one marked line per trial."""
    import psutil
    from torch_workload import torch_fit  # bench/ is this script's folder

    from trainguard._measured_loop import _MARK, trial_line

    spec = json.loads(sys.argv[2])
    proc = psutil.Process()
    started = time.time()
    import torch  # noqa: F401 - start-up outside the first trial, as in the Keras naive child

    print(_MARK + json.dumps({"event": "ready", "import_s": time.time() - started}), flush=True)
    for index in range(spec["trials"]):
        start = time.time()
        value = torch_fit(spec["params"])
        print(trial_line(index, start, time.time(), proc.memory_info().rss, value), flush=True)
    sys.stdout.flush()
    os._exit(0)


def _optuna_child() -> None:
    """The (d) child: an Optuna study whose objective is one fit; prints one marked line per trial."""
    import optuna
    import psutil

    from trainguard._measured_loop import trial_line
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
    from trainguard._measured_loop import run_naive

    return _half_to_row(run_naive(trials), "(a) naive loop, 1 process")


def bench_runner(trials: int, workers: int, store: str) -> dict[str, Any]:
    from trainguard.demo import run_with_runner
    from trainguard.store import Store

    half = run_with_runner(trials, store=store, workers=workers, name=f"bench-{workers}w-{os.getpid()}")
    row = _half_to_row(
        half, f"({'b' if workers == 1 else 'e'}) trainguard Runner, {workers} worker{'s' * (workers > 1)}"
    )
    with Store(store, readonly=True) as reader:
        run = reader.get_run(half.run_name)
        events = reader.events(run.run_id, kinds=["workers", "threads", "recycle"])
        trials_done = reader.trials(run.run_id)
        attempts = reader.attempts(run.run_id)
    row["events"] = [{"kind": e.kind, "message": e.message} for e in events]
    # each worker's highest trial peak (its own tree, read by the Runner): what the pool's sum is made of
    worker_peaks: dict[int, int] = {}
    for a in attempts:
        if a.peak_rss_bytes:
            worker_peaks[a.worker_id] = max(worker_peaks.get(a.worker_id, 0), a.peak_rss_bytes)
    row["worker_peak_rss_bytes"] = [worker_peaks[w] for w in sorted(worker_peaks)]
    durations = sorted(t.duration_s or 0.0 for t in trials_done)
    row["median_trial_s"] = durations[len(durations) // 2] if durations else None
    return row


def bench_runner_general(
    label: str,
    fn: Any,
    trials: int,
    store: str,
    *,
    workers: int | str = 1,
    memory_budget: int | None = None,
    keras_backend: str | None = "tensorflow",
    policy: Any = None,
    runner_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Runner configuration sampled from outside at 10 Hz (the workers' trees summed), with the
    pool's recorded choices (workers, threads, early starts, budget events) from the store."""
    from trainguard._measured_loop import TreeSampler, theil_sen_slope
    from trainguard.cli.show import POOL_EVENT_KINDS
    from trainguard.process import tree_memory
    from trainguard.runner import Runner
    from trainguard.store import Store

    me = os.getpid()
    name = f"bench-{label[:3].strip('()')}-{os.getpid()}-{time.time():.0f}"
    t0 = time.time()
    with TreeSampler(lambda: tree_memory(me).children_rss_bytes or None, interval_s=0.1) as sampler:
        with Runner(
            workers=workers,
            memory_budget=memory_budget,
            store=store,
            keras_backend=keras_backend,
            policy=policy,
            **(runner_kwargs or {}),
        ) as runner:
            results = sorted(runner.imap(fn, [{} for _ in range(trials)], name=name), key=lambda r: r.index)
    wall_s = time.time() - t0
    with Store(store, readonly=True) as reader:
        run = reader.get_run(name)
        worker_rows = reader.workers(run.run_id)
        events = reader.events(
            run.run_id,
            kinds=[*POOL_EVENT_KINDS, "recycle"],
        )
    peaks = [r.peak_rss_bytes for r in results]
    durations = sorted(r.duration_s or 0.0 for r in results)
    return {
        "config": label,
        "wall_s": wall_s,
        # the outside 10 Hz reading only: what the budget is held to
        "peak_rss_bytes": sampler.peak_rss_bytes,
        "runner_trial_peak_max_bytes": max((p for p in peaks if p), default=None),
        "growth_bytes_per_trial": theil_sen_slope(peaks[1:]),
        "trial_peak_rss_bytes": peaks,
        "median_trial_s": durations[len(durations) // 2] if durations else None,
        "recycles": sum(w.reason == "recycled" for w in worker_rows),
        "workers_started": len(worker_rows),
        "failed": sum(r.status != "ok" for r in results),
        "memory_budget_bytes": memory_budget,
        "events": [{"kind": e.kind, "message": e.message} for e in events],
    }


def bench_pool(trials: int, per_trial_timeout_s: float = 180.0, workers: int = 1) -> dict[str, Any]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    import psutil

    from trainguard._measured_loop import TreeSampler, theil_sen_slope
    from trainguard.process import tree_memory

    me = os.getpid()
    os.environ["KERAS_BACKEND"] = "tensorflow"  # inherited by the spawned children
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows: list[dict[str, Any]] = []
    hung = False
    t0 = time.time()
    with TreeSampler(lambda: tree_memory(me).children_rss_bytes or None, interval_s=0.1) as sampler:
        pool = ProcessPoolExecutor(
            max_workers=workers, max_tasks_per_child=1, mp_context=multiprocessing.get_context("spawn")
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
        "config": "(c) ProcessPoolExecutor, max_tasks_per_child=1, spawn"
        if workers == 1
        else f"(j) ProcessPoolExecutor, max_workers={workers}, max_tasks_per_child=1, spawn",
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
    from trainguard._measured_loop import run_measured_child

    spec = json.dumps({"trials": trials, "params": {}})
    half = run_measured_child(
        [sys.executable, str(Path(__file__).resolve()), "--optuna-child", spec], trials, mode="optuna"
    )
    return _half_to_row(half, "(d) Optuna study, 1 process")


def bench_ray(trials: int, timeout_s: float | None = None) -> dict[str, Any] | None:
    """(g): Ray Tune in a child process, measured over the whole Ray process tree. None: no ray."""
    import importlib.util

    import psutil

    if importlib.util.find_spec("ray") is None:
        return None
    from trainguard._measured_loop import _MARK, TreeSampler, _child_env, theil_sen_slope

    # Short path: Ray puts unix sockets under its temp dir (108-byte limit on their paths).
    base = tempfile.mkdtemp(prefix="tgray-", dir="/tmp")
    spec = {
        "trials": trials,
        "params": {},
        "ray_temp_dir": os.path.join(base, "ray"),
        "storage_path": os.path.join(base, "results"),
    }
    env = _child_env()
    env["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage report attempts from an offline machine
    timeout_s = timeout_s if timeout_s is not None else 120.0 + 60.0 * trials
    max_procs = 0

    def read() -> int | None:
        nonlocal max_procs
        got = _sum_memory("rss")
        if got is None:
            return None
        max_procs = max(max_procs, got[1])
        return got[0]

    # e.g. multiprocessing's resource tracker from an earlier configuration: not Ray's to clean up
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    _EXTRA_MARKERS.append(base)
    _outside_tree.clear()
    rows: list[dict[str, Any]] = []
    phases: dict[str, Any] = {}
    stderr_lines: list[str] = []
    timed_out = False
    try:
        t0 = time.time()
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--ray-child", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # one process group to end if it hangs
        )
        drain = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True)
        drain.start()

        def watchdog() -> None:
            nonlocal timed_out
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)

        threading.Thread(target=watchdog, daemon=True).start()
        with TreeSampler(read, interval_s=0.1) as sampler:
            for line in proc.stdout:
                if line.startswith(_MARK):
                    event = json.loads(line[len(_MARK) :])
                    if event.get("event") == "trial":
                        rows.append(event)
                elif line.startswith(_RAY_MARK):
                    phases = json.loads(line[len(_RAY_MARK) :])
            exit_code = proc.wait()
        wall_s = time.time() - t0
        drain.join(timeout=5)
        # ray.shutdown() should have ended every Ray process; anything left is counted, then ended
        # so that the configurations after this one run on a quiet machine.
        time.sleep(1.0)
        _marked_cache["at"] = 0.0
        leftover = [
            p
            for p in _measured_processes()
            if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]
        leftover_cmdlines = []
        for p in leftover:
            try:
                leftover_cmdlines.append(" ".join(p.cmdline())[:200])
            except psutil.Error:
                pass
        for p in leftover:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(leftover, timeout=10)
    finally:
        _EXTRA_MARKERS.remove(base)
        shutil.rmtree(base, ignore_errors=True)
    if exit_code != 0 or timed_out or not phases:
        tail = " | ".join(line.strip() for line in stderr_lines[-3:] if line.strip())
        raise RuntimeError(
            f"the Ray Tune child failed (exit code {exit_code}, timed out {timed_out}, "
            f"{len(rows)} of {trials} trials): {tail}"
        )
    peaks = [
        max(filter(None, [sampler.peak_between(r["start"], r["end"]), r["rss_after_bytes"]])) for r in rows
    ]
    pids = [r["value"]["pid"] for r in rows]
    return {
        "config": "(g) Ray Tune, fresh actor per trial, 1 at a time",
        "wall_s": wall_s,
        "peak_rss_bytes": max([sampler.peak_rss_bytes, *peaks]),
        "growth_bytes_per_trial": theil_sen_slope(peaks[1:]),
        "trial_peak_rss_bytes": peaks,
        "trial_worker_rss_after_bytes": [r["rss_after_bytes"] for r in rows],
        "recycles": max(0, len(set(pids)) - 1),
        "workers_started": len(set(pids)),
        "failed": trials - len(rows),
        "trials": trials,
        "phases_s": {k: v for k, v in phases.items() if k.endswith("_s")},
        "errors": phases.get("errors", []),
        "max_processes": max_procs,
        "driver_peak_rss_bytes": phases.get("driver_peak_rss_bytes"),
        "leftover_processes": len(leftover),
        "processes_outside_tree": len(_outside_tree),
        "outside_tree_cmdlines": list(_outside_tree.values()),
        "leftover_cmdlines": leftover_cmdlines,
    }


def bench_overshoot(store: str, kills: int = 3) -> dict[str, Any]:
    """Kill overshoot: RSS at the kill minus the limit, from the Runner's record and a 200 Hz outside sampler."""
    from trainguard._measured_loop import TreeSampler
    from trainguard.process import tree_memory
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


def _grows_kwargs() -> dict[str, Any]:
    """Runner arguments that leave the Keras-TF fit's per-fit growth in place: the worker's release of
    TensorFlow's custom-gradient registry off, where this version has it (before it, the fit grows)."""
    import inspect

    from trainguard.runner import Runner

    return (
        {"tf_custom_gradients": False}
        if "tf_custom_gradients" in inspect.signature(Runner).parameters
        else {}
    )


def _fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def render(results: dict[str, Any]) -> str:
    rows = results["configs"]
    naive = rows[0]
    single = results["single_trial_peak_bytes"]
    lines = [
        f"trainguard runner benchmark, {results['trials']} x keras_fit (defaults, TF backend), {results['date']}",
        "",
        "| configuration | wall s | wall / naive | peak RSS-sum MiB | peak / naive | peak / single trial | peak PSS-sum MiB | PSS / naive | growth MiB/trial | workers (recycled) | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        growth = row["growth_bytes_per_trial"]
        note = " (hung: gh-115634)" if row.get("hung") else ""
        if row.get("trials", results["trials"]) != results["trials"]:
            note += f" ({row['trials']} trials)"
        pss = row.get("peak_pss_bytes")
        lines.append(
            f"| {row['config']}{note} | {row['wall_s']:.1f} | {_fmt_ratio(row['wall_s'], naive['wall_s'])} | "
            f"{row['peak_rss_bytes'] / MIB:.0f} | {_fmt_ratio(row['peak_rss_bytes'], naive['peak_rss_bytes'])} | "
            f"{_fmt_ratio(row['peak_rss_bytes'], single)} | {'-' if pss is None else f'{pss / MIB:.0f}'} | "
            f"{_fmt_ratio(pss, naive.get('peak_pss_bytes'))} | {'-' if growth is None else f'{growth / MIB:+.1f}'} | "
            f"{row.get('workers_started', 1) or 1} ({row.get('recycles', 0)}) | {row['failed']} |"
        )
    for skipped in results.get("skipped", []):
        lines.append(f"| {skipped} | - | - | - | - | - | - | - | - | - | - |")
    lines.append("")
    lines.append(
        "RSS-sum: RSS summed over the configuration's processes at 10 Hz (shared pages counted once per "
        "process); PSS-sum: PSS summed over the same processes at 5 Hz (shared pages divided among them)."
    )
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
    if "(e)" in by:
        e = by["(e)"]
        checks_15 = [
            ("2 workers wall <= 0.70 x naive (issue 15)", e["wall_s"] / naive["wall_s"], 0.70),
            ("2 workers peak <= 2.1 x single-trial peak (issue 15)", e["peak_rss_bytes"] / single, 2.1),
        ]
        own = e.get("worker_peak_rss_bytes") or []
        if own:
            lines.append(
                f"- (e) each worker's own highest trial peak: {' + '.join(f'{p / MIB:.0f}' for p in own)} MiB "
                f"({', '.join(f'{p / single:.3f}' for p in own)} x single) = {sum(own) / single:.3f} x single; "
                f"the tree peak sampled {e['peak_rss_bytes'] / single:.3f} x"
            )
        if "(b)" in by:
            checks_15.append(
                ("1 worker wall <= 1.0 x naive (issue 15)", by["(b)"]["wall_s"] / naive["wall_s"], 1.0)
            )
            checks_15.append(("2 workers / 1 worker wall", e["wall_s"] / by["(b)"]["wall_s"], 0.70))
        for label, value, target in checks_15:
            lines.append(f"- {label}: {value:.2f} -> {'met' if value <= target else 'MISSED'}")
    for key in ("(l)", "(m)"):
        if key in by:
            row = by[key]
            lines.append(
                f"- {key} 2 workers, a workload that grows: wall / naive {row['wall_s'] / naive['wall_s']:.2f}, peak / "
                f"single trial {row['peak_rss_bytes'] / single:.2f}, {row['recycles']} recycles, median trial "
                f"{row['median_trial_s']:.2f} s"
            )
    for key in ("(h)", "(i)", "(k)"):
        if key in by:
            row = by[key]
            budget = row["memory_budget_bytes"]
            lines.append(
                f"- {key} budget {budget / MIB:.0f} MiB: outside 10 Hz peak {row['peak_rss_bytes'] / MIB:.0f} MiB = "
                f"{row['peak_rss_bytes'] / budget:.2f} x the budget -> {'under' if row['peak_rss_bytes'] <= budget else 'OVER'}; "
                f"median trial {row['median_trial_s']:.2f} s; {row['workers_started']} workers started"
            )
            for event in row.get("events", []):
                if event["kind"] != "recycle":
                    lines.append(f"    - {event['kind']}: {event['message']}")
    if "(h)" in by and "(i)" in by:
        ratio = by["(i)"]["wall_s"] / by["(h)"]["wall_s"]
        lines.append(
            f"- budget 3x wall / budget 1.6x wall: {ratio:.2f} -> {'faster' if ratio < 1 else 'NOT faster'}"
        )
    for row in rows:
        if row["config"].startswith("(e)") or row["config"].startswith("(b)"):
            for event in row.get("events", []):
                if event["kind"] in ("threads", "workers"):
                    lines.append(f"- {row['config'][:3]} {event['kind']}: {event['message']}")
    torch_rows = results.get("torch_configs") or []
    if torch_rows:
        tn = torch_rows[0]
        tsingle = tn["trial_peak_rss_bytes"][0]
        lines += [
            "",
            "| torch workload | wall s | wall / torch naive | peak RSS-sum MiB | peak / single trial | median trial s | workers (recycled) | failed |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in torch_rows:
            med = row.get("median_trial_s")
            lines.append(
                f"| {row['config']} | {row['wall_s']:.1f} | {_fmt_ratio(row['wall_s'], tn['wall_s'])} | "
                f"{row['peak_rss_bytes'] / MIB:.0f} | {_fmt_ratio(row['peak_rss_bytes'], tsingle)} | "
                f"{'-' if med is None else f'{med:.2f}'} | {row.get('workers_started', 1) or 1} ({row.get('recycles', 0)}) | {row['failed']} |"
            )
        lines.append(f"torch single-trial peak (trial 0 of its naive loop): {tsingle / MIB:.0f} MiB")
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
    if "(g)" in by:
        g = by["(g)"]
        ph = g.get("phases_s", {})
        for key in ("(h)", "(i)", "(k)"):
            if key in by and g["trials"] == results["trials"]:
                lines.append(
                    f"- {key} against Ray Tune, same run: wall {by[key]['wall_s'] / g['wall_s']:.2f} x, "
                    f"peak {by[key]['peak_rss_bytes'] / g['peak_rss_bytes']:.2f} x"
                )
        lines.append(
            f"- Ray Tune: {g['trials']} trials in {g['workers_started']} worker processes; import ray "
            f"{ph.get('import_s', 0):.1f} s, ray.init {ph.get('init_s', 0):.1f} s, Tuner.fit {ph.get('fit_s', 0):.1f} s, "
            f"ray.shutdown {ph.get('shutdown_s', 0):.1f} s; driver (Tune controller) peak RSS "
            f"{(g.get('driver_peak_rss_bytes') or 0) / MIB:.0f} MiB; up to {g['max_processes']} processes "
            f"({g.get('processes_outside_tree', 0)} outside this process's tree); "
            f"{g['leftover_processes']} left after shutdown"
        )
        if g["trials"] != results["trials"]:
            per_trial = g["wall_s"] / g["trials"] / (naive["wall_s"] / results["trials"])
            lines.append(
                f"- Ray Tune ran {g['trials']} trials, not {results['trials']}: wall per trial / naive's = {per_trial:.2f}"
            )
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
        "--only", default="abcdefg", help="which configurations to run, e.g. 'ab' (default abcdefg)"
    )
    parser.add_argument(
        "--ray-trials",
        type=int,
        default=None,
        help="trials for (g) Ray Tune (default: --trials; 40 take about 5 minutes)",
    )
    parser.add_argument(
        "--pss-hz", type=float, default=5.0, help="PSS-sum sampling rate, 0 to skip (default 5)"
    )
    parser.add_argument(
        "--out", default=str(HERE / "results" / "runner_bench.json"), help="where to write the JSON"
    )
    args = parser.parse_args(argv)
    trials = args.trials or (8 if args.quick else 40)
    if trials < 2:
        parser.error("--trials must be >= 2")
    ray_trials = args.ray_trials or trials
    if ray_trials < 2:
        parser.error("--ray-trials must be >= 2")
    if args.pss_hz < 0:
        parser.error("--pss-hz must be >= 0")
    only = set(args.only)
    if "a" not in only:
        parser.error("--only must include 'a': every ratio is against the naive loop")
    from importlib import metadata

    from trainguard.demo import versions

    scratch = tempfile.mkdtemp(prefix="trainguard-bench-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # scratch: the figures are printed
    store = os.path.join(scratch, "bench.db")
    configs: list[dict[str, Any]] = []

    failures: list[dict[str, str]] = []
    skipped: list[str] = []

    def read_pss() -> int | None:
        got = _sum_memory("pss")
        return got[0] if got else None

    def step(label: str, fn, *fn_args, pss: bool = True, **fn_kwargs):
        print(f"[{time.strftime('%H:%M:%S')}] {label} ...", file=sys.stderr, flush=True)
        from trainguard._measured_loop import TreeSampler

        try:
            if pss and args.pss_hz > 0:
                with TreeSampler(read_pss, interval_s=1.0 / args.pss_hz) as pss_sampler:
                    value = fn(*fn_args, **fn_kwargs)
                if value is not None and pss_sampler.series:
                    value["peak_pss_bytes"] = pss_sampler.peak_rss_bytes
            else:
                value = fn(*fn_args, **fn_kwargs)
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

    def keras_runner(label: str, **kwargs: Any) -> None:
        """One Runner configuration on the Keras fit, added to the table when it ran."""
        row = step(
            label, bench_runner_general, label, "trainguard.workloads:keras_fit", trials, store, **kwargs
        )
        if row is not None:
            configs.append(row)

    grows = _grows_kwargs()
    for key, ratio in (("l", None), ("m", 1.05)):
        if key not in only:
            continue
        from trainguard import Policy

        label = f"({key}) trainguard Runner, 2 workers, a workload that grows (tf_custom_gradients=False)"
        if ratio is not None:
            label += f", Policy(peak_ratio={ratio:g})"
        keras_runner(
            label, workers=2, policy=None if ratio is None else Policy(peak_ratio=ratio), runner_kwargs=grows
        )
    single_peak = configs[0]["trial_peak_rss_bytes"][0]
    for key, ratio in (("h", 1.6), ("i", 3.0), ("k", 4.5)):
        if key in only:
            label = f"({key}) trainguard Runner, workers=auto, memory_budget={ratio:g} x single-trial peak"
            # (k) shows a replacement started early: only a worker that grows is replaced
            if key == "k":
                label += ", a workload that grows (tf_custom_gradients=False)"
            keras_runner(
                label,
                workers="auto",
                memory_budget=int(ratio * single_peak),
                runner_kwargs=grows if key == "k" else None,
            )
    if "j" in only and (row := step("(j) ProcessPoolExecutor x2", bench_pool, trials, 180.0, 2)) is not None:
        configs.append(row)
    if "t" in only:
        from trainguard._measured_loop import run_measured_child

        def torch_naive() -> dict[str, Any]:
            spec = json.dumps({"trials": trials, "params": {}})
            half = run_measured_child(
                [sys.executable, str(Path(__file__).resolve()), "--torch-child", spec],
                trials,
                mode="torch naive",
            )
            return _half_to_row(half, "(t-a) torch: naive loop, 1 process")

        torch_rows = [step("(t-a) torch naive", torch_naive)]
        for workers in (1, 2):
            label = f"(t-{'b' if workers == 1 else 'e'}) torch: trainguard Runner, {workers} worker{'s' * (workers > 1)}"
            torch_rows.append(
                step(
                    label,
                    bench_runner_general,
                    label,
                    f"{Path(__file__).resolve().parent / 'torch_workload.py'}:torch_fit",
                    trials,
                    store,
                    workers=workers,
                    keras_backend=None,
                )
            )
        torch_configs = [r for r in torch_rows if r is not None]
    else:
        torch_configs = []
    if "g" in only:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            skipped.append("(g) Ray Tune: skipped, ray is not installed (pip install -e '.[bench]')")
        elif (row := step("(g) Ray Tune", bench_ray, ray_trials)) is not None:
            configs.append(row)
    overshoot = (
        step("(f) kill overshoot", bench_overshoot, store, 2 if args.quick else 3, pss=False)
        if "f" in only
        else None
    )
    vers = versions()
    for package in ("optuna", "ray"):
        try:
            vers[package] = metadata.version(package)
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
        "torch_configs": torch_configs,
        "overshoot": overshoot,
        "failures": failures,
        "skipped": skipped,
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
    if len(sys.argv) > 2 and sys.argv[1] == "--torch-child":
        _torch_child()
    if len(sys.argv) > 2 and sys.argv[1] == "--ray-child":
        _ray_child()
    sys.exit(main())
