"""Benchmark: the Keras workload on the local backend, on the Ray backend (one node) and under Ray Tune.

    .venv/bin/python bench/ray_backend_bench.py                # all three, 40 trials (about 7 minutes)
    .venv/bin/python bench/ray_backend_bench.py --only lr      # local and Ray backend (about 3 minutes)
    .venv/bin/python bench/ray_backend_bench.py --only lt      # local and Ray Tune (about 5 minutes)
    .venv/bin/python bench/ray_backend_bench.py --trials 6     # for development

Every configuration runs ``trainguard.workloads.keras_fit`` with its defaults on the TensorFlow
backend, one trial at a time, one configuration after the other, and is sampled from outside at
10 Hz (RSS summed over processes):

  (l) trainguard Runner, local backend, 1 worker, default policy: the worker trees (the supervisor
      lives in the benchmark's own process and is left out, as in bench/runner_bench.py)
  (r) trainguard Runner(backend="ray"), 1 worker slot of 2 CPUs, on a one-node Ray started by the
      benchmark (ray.init(num_cpus=2)); the trainguard worker trees, the slot's node-local
      supervisor (the SlotAgent actor) and Ray's own processes (GCS, raylet, dashboard agents, idle
      Ray workers) are summed separately. Wall time with and without ray.init/ray.shutdown
  (t) Ray Tune with a fresh actor per trial, one at a time: bench/runner_bench.py's configuration
      (g), whose memory is the whole Ray tree (driver, where Tune's controller runs, included)

Each part of ``--only`` runs (l) first, so every ratio is measured side by side in one run. Targets
(issue 13): the Ray backend's worker-tree peak within the local bound (1.25 x one trial's peak, the
first trial of a fresh worker), Ray's own processes reported apart; its wall time far closer to
the local backend's than Ray Tune's (3.9 x).

Prints a markdown table and writes the raw figures to bench/results/ray_backend_bench.json
(results of earlier parts are kept, keyed by configuration).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MIB = 2**20
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "ray_backend_bench.json"
FN = "trainguard.workloads:keras_fit"


class ClassSampler:
    """At 10 Hz, the RSS of this process's descendants summed by class: ``trial`` (trainguard
    worker trees), ``agent`` (SlotAgent actors) and ``ray`` (every other process, i.e. Ray's own)."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peaks: dict[str, int] = {
            "trial": 0,
            "agent": 0,
            "ray": 0,
            "trainguard": 0,
            "all": 0,
            "driver": 0,
        }
        self.processes_max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ClassSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._once()
            except Exception:  # noqa: BLE001 - a lost sample is harmless
                continue

    def _once(self) -> None:
        import psutil

        me = psutil.Process()
        procs = me.children(recursive=True)
        parent_of: dict[int, int] = {}
        name_of: dict[int, str] = {}
        rss_of: dict[int, int] = {}
        for p in procs:
            try:
                with p.oneshot():
                    parent_of[p.pid] = p.ppid()
                    name_of[p.pid] = " ".join(p.cmdline()[:4])
                    rss_of[p.pid] = p.memory_info().rss
            except psutil.Error:
                continue
        roots = {pid for pid, name in name_of.items() if "trainguard.runner.worker.process" in name}
        sums = {"trial": 0, "agent": 0, "ray": 0}
        for pid, rss in rss_of.items():
            cls = "ray"
            cur = pid
            for _ in range(64):
                if cur in roots:
                    cls = "trial"
                    break
                cur = parent_of.get(cur, 0)
                if cur == 0 or cur == me.pid:
                    break
            if cls == "ray" and "SlotAgent" in name_of.get(pid, ""):
                cls = "agent"
            sums[cls] += rss
        driver = me.memory_info().rss
        sums_all = {
            **sums,
            "trainguard": sums["trial"] + sums["agent"],
            "all": sum(sums.values()) + driver,
            "driver": driver,
        }
        for key, value in sums_all.items():
            self.peaks[key] = max(self.peaks[key], value)
        self.processes_max = max(self.processes_max, len(rss_of))


def _trial_rows(store_path: str, name: str) -> dict[str, Any]:
    from trainguard.store import Store

    with Store(store_path, readonly=True) as reader:
        run = reader.get_run(name)
        trials = reader.trials(run.run_id)
        workers = reader.workers(run.run_id)
    peaks = [t.peak_rss_bytes or 0 for t in trials]
    return {
        "trial_peak_rss_bytes": peaks,
        "first_trial_peak_bytes": peaks[0] if peaks else None,
        "workers_started": len(workers),
        "recycles": sum(w.reason == "recycled" for w in workers),
        "failed": sum(t.status != "ok" for t in trials),
    }


def bench_local(trials: int, store: str) -> dict[str, Any]:
    from trainguard.runner import Runner

    name = f"local-{os.getpid()}-{time.time():.0f}"
    t0 = time.time()
    with ClassSampler() as sampler, Runner(workers=1, store=store, keras_backend="tensorflow") as runner:
        results = runner.map(FN, [{} for _ in range(trials)], name=name)
    wall_s = time.time() - t0
    return {
        "config": "(l) trainguard Runner, local backend, 1 worker",
        "wall_s": wall_s,
        "peak_trial_tree_bytes": sampler.peaks["trial"],
        "peak_driver_bytes": sampler.peaks["driver"],
        "peak_all_bytes": sampler.peaks["all"],
        "failed_results": sum(r.status != "ok" for r in results),
        **_trial_rows(store, name),
    }


def bench_ray_backend(trials: int, store: str) -> dict[str, Any]:
    import ray

    from trainguard.runner import Runner

    base = tempfile.mkdtemp(prefix="tgrb-", dir="/tmp")  # short: Ray's socket paths are limited
    name = f"ray-{os.getpid()}-{time.time():.0f}"
    t0 = time.time()
    try:
        with ClassSampler() as sampler:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                _temp_dir=base,
                logging_level="ERROR",
            )
            t_init = time.time()
            with Runner(
                workers=1, backend="ray", resources={"CPU": 2}, store=store, keras_backend="tensorflow"
            ) as runner:
                results = runner.map(FN, [{} for _ in range(trials)], name=name)
            t_map = time.time()
            ray.shutdown()
            t_end = time.time()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "config": "(r) trainguard Runner, Ray backend, 1 slot on one node",
        "wall_s": t_end - t0,
        "map_s": t_map - t_init,
        "init_s": t_init - t0,
        "shutdown_s": t_end - t_map,
        "peak_trainguard_bytes": sampler.peaks["trainguard"],
        "peak_trial_tree_bytes": sampler.peaks["trial"],
        "peak_driver_bytes": sampler.peaks["driver"],
        "peak_agent_bytes": sampler.peaks["agent"],
        "peak_ray_own_bytes": sampler.peaks["ray"],
        "peak_all_bytes": sampler.peaks["all"],
        "processes_max": sampler.processes_max,
        "failed_results": sum(r.status != "ok" for r in results),
        **_trial_rows(store, name),
    }


def bench_tune(trials: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    import runner_bench

    row = runner_bench.bench_ray(trials)
    if row is None:
        raise RuntimeError("ray[tune] is not installed: pip install -e '.[bench]'")
    row["config"] = "(t) Ray Tune, fresh actor per trial, 1 at a time"
    row["peak_all_bytes"] = row["peak_rss_bytes"]
    return row


def _mib(value: Any) -> str:
    return f"{value / MIB:.0f}" if value else "-"


def render(results: dict[str, Any], meta: dict[str, Any]) -> str:
    local = results.get("l")
    lines = [
        f"{meta['date']}; Python {meta['python']}, ray {meta.get('ray')}, tensorflow {meta.get('tensorflow')}, "
        f"keras {meta.get('keras')}; {meta['trials']} trials of {FN}",
        "",
        "| configuration | wall s | wall / local | worker trees peak MiB | / one trial | node supervisor MiB "
        "| Ray's own processes MiB | driver MiB | everything MiB | processes (recycled) | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    one = local["first_trial_peak_bytes"] if local else None
    for key in ("l", "r", "t"):
        row = results.get(key)
        if row is None:
            continue
        ratio = f"{row['wall_s'] / local['wall_s']:.2f}" if local else "-"
        trees = row.get("peak_trial_tree_bytes")
        per_one = f"{trees / one:.2f}" if trees and one else "-"
        if key == "t":  # Tune: one figure for the whole Ray tree, its trial actors included
            trees_s, agent_s, ray_s, driver_s = "-", "-", "-", _mib(row.get("driver_peak_rss_bytes"))
        else:
            trees_s = _mib(trees)
            agent_s = _mib(row.get("peak_agent_bytes")) if key == "r" else "(in driver)"
            ray_s = _mib(row.get("peak_ray_own_bytes")) if key == "r" else "-"
            driver_s = _mib(row.get("peak_driver_bytes"))
        lines.append(
            f"| {row['config']} | {row['wall_s']:.1f} | {ratio} | {trees_s} | {per_one} | {agent_s} | {ray_s} | "
            f"{driver_s} | {_mib(row.get('peak_all_bytes'))} | {row.get('workers_started')} ({row.get('recycles')}) | "
            f"{row.get('failed')} |"
        )
    if one:
        lines += [
            "",
            f"One trial's peak (the first trial of the local run's fresh worker): {one / MIB:.0f} MiB.",
        ]
    r = results.get("r")
    if r:
        lines.append(
            f"Ray backend: ray.init {r['init_s']:.1f} s, map {r['map_s']:.1f} s"
            + (f" ({r['map_s'] / local['wall_s']:.2f} x local)" if local else "")
            + f", ray.shutdown {r['shutdown_s']:.1f} s; worker trees with their node supervisor "
            f"{_mib(r['peak_trainguard_bytes'])} MiB"
            + (f" ({r['peak_trainguard_bytes'] / one:.2f} x one trial)" if one else "")
            + f"; at most {r['processes_max']} processes."
        )
    t = results.get("t")
    if t:
        ph = t.get("phases_s", {})
        lines.append(
            f"Ray Tune: import {ph.get('import_s', 0):.1f} s, ray.init {ph.get('init_s', 0):.1f} s, Tuner.fit "
            f"{ph.get('fit_s', 0):.1f} s; its peak counts the whole Ray tree (driver with Tune's controller "
            f"{_mib(t.get('driver_peak_rss_bytes'))} MiB)."
        )
    return "\n".join(lines)


def _versions() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("ray", "tensorflow-cpu", "keras"):
        try:
            out[pkg.replace("-cpu", "")] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg.replace("-cpu", "")] = None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument(
        "--only", default="lrt", help="which configurations: l (local), r (Ray backend), t (Ray Tune)"
    )
    args = parser.parse_args(argv)
    if args.trials < 2 or not set(args.only) <= set("lrt") or not args.only:
        parser.error("--trials must be >= 2 and --only letters of 'lrt'")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    previous: dict[str, Any] = {}
    if RESULTS.exists():
        previous = json.loads(RESULTS.read_text()).get("results", {})
    results: dict[str, Any] = {}
    work = tempfile.mkdtemp(prefix="tg-raybench-")
    try:
        for key in "lrt":
            if key not in args.only:
                continue
            print(f"running ({key}) ...", file=sys.stderr, flush=True)
            if key == "l":
                results["l"] = bench_local(args.trials, os.path.join(work, "l.db"))
            elif key == "r":
                results["r"] = bench_ray_backend(args.trials, os.path.join(work, "r.db"))
            else:
                results["t"] = bench_tune(args.trials)
            print(f"  {results[key]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "trials": args.trials,
        **_versions(),
    }
    print(render(results, meta))
    RESULTS.parent.mkdir(exist_ok=True)
    merged = {**previous, **{f"{k}-{args.only}": v for k, v in results.items()}}
    RESULTS.write_text(json.dumps({"meta": meta, "results": merged}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
