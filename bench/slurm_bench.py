"""Benchmark: 40 Keras trials on the local backend, in Slurm pilots, and as one Slurm job per trial.

    .venv/bin/python bench/slurm_bench.py               # 40 trials each (about 6 minutes here)
    .venv/bin/python bench/slurm_bench.py --trials 6    # for development

Needs a Slurm (``bash scripts/slurm-local.sh start`` gives a one-node one). Every configuration
runs ``trainguard.workloads.keras_fit`` (256 units, 2,000 rows) on the TensorFlow backend, two trials at
a time, one configuration after the other, in one run:

  (l) trainguard Runner, local backend, workers=2
  (s) trainguard Runner(backend="slurm"), workers=2: two pilot jobs of one worker each, submitted
      with submitit; the wall time includes submitting them and their start
  (a) submitit's plain ``executor.map_array(keras_fit, params)``, one Slurm job per trial
      (``slurm_array_parallelism=2``, so two at a time as above): what users write instead

Prints a markdown table and writes the figures to bench/results/slurm_bench.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent


def _versions() -> dict[str, str]:
    import submitit

    import trainguard

    slurm = subprocess.run(["sbatch", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "trainguard": trainguard.__version__,
        "submitit": submitit.__version__,
        "slurm": slurm,
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }


def run_local(params: list[dict], folder: Path) -> dict:
    from trainguard import Runner

    start = time.perf_counter()
    with Runner(workers=2, store=folder / "local.db", keras_backend="tensorflow") as runner:
        results = runner.map("trainguard.workloads:keras_fit", params, name="bench-local")
    return {"wall_s": time.perf_counter() - start, "ok": sum(r.ok for r in results)}


def run_pilots(params: list[dict], folder: Path) -> dict:
    from trainguard import Runner

    start = time.perf_counter()
    opts = {"folder": str(folder / "pilots"), "time": 30}
    with Runner(
        workers=2, backend="slurm", slurm=opts, store=folder / "slurm.db", keras_backend="tensorflow"
    ) as runner:
        results = runner.map("trainguard.workloads:keras_fit", params, name="bench-slurm")
    return {"wall_s": time.perf_counter() - start, "ok": sum(r.ok for r in results)}


def run_map_array(params: list[dict], folder: Path) -> dict:
    import submitit

    from trainguard.workloads import keras_fit

    os.environ["KERAS_BACKEND"] = "tensorflow"
    start = time.perf_counter()
    executor = submitit.SlurmExecutor(folder=str(folder / "array" / "%j"))
    executor.update_parameters(time=30, cpus_per_task=1, array_parallelism=2)
    jobs = executor.map_array(keras_fit, params)
    done = 0
    for job in jobs:
        try:
            job.result()
            done += 1
        except Exception as err:  # noqa: BLE001 - counted, shown
            print(f"job {job.job_id} failed: {err}", file=sys.stderr)
    return {"wall_s": time.perf_counter() - start, "ok": done}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args(argv)
    # the seed's model, smaller (256 units, 2,000 rows): 40 trials fit a shared 2-core machine
    params = [{"seed": i, "units": 256, "rows": 2000} for i in range(args.trials)]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="tg-slurm-bench-") as tmp:
        folder = Path(tmp)
        for key, label, fn in (
            ("l", "(l) trainguard Runner, local backend, workers=2", run_local),
            ("s", "(s) trainguard Runner(backend='slurm'), 2 pilot jobs x 1 worker", run_pilots),
            ("a", "(a) submitit map_array, one Slurm job per trial, 2 at a time", run_map_array),
        ):
            rows[key] = {"label": label, **fn(params, folder)}
            print(f"{label}: {rows[key]['wall_s']:.1f} s, {rows[key]['ok']}/{args.trials} ok", flush=True)
    base = rows["l"]["wall_s"]
    print(f"\n| configuration ({args.trials} Keras trials) | wall s | vs local | trials ok |")
    print("| --- | ---: | ---: | ---: |")
    for row in rows.values():
        print(f"| {row['label']} | {row['wall_s']:.1f} | {row['wall_s'] / base:.2f} x | {row['ok']} |")
    out = HERE / "results" / "slurm_bench.json"
    out.parent.mkdir(exist_ok=True)
    record = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "trials": args.trials,
        "versions": _versions(),
        "rows": rows,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
