"""Where training loops live now: Keras on JAX beside Keras on TensorFlow and torch, the Hugging
Face Trainer and Lightning.

``--part keras``: 30 fits of the benchmark workload (``trainguard.workloads.keras_fit``: a new
Dense(512) x2 model on 2,000 x 100 each fit, with the seed's ``clear_session()`` and
``gc.collect()``) per Keras backend, each backend and mode in a fresh interpreter: as is, with
``trainguard.frameworks.cleanup()`` after each fit, and each fit inside ``trainguard.scope()``.
Prints the growth per fit over fits 5..29 (Theil-Sen, 95 % interval) and seconds per fit.

``--part trainer``: the Hugging Face search of test_transformers.py (10 trials of a tiny BERT,
the same sampler seed) in the caller against guarded (the caller's own RSS, what it imported,
wall time); and a fit that keeps 20 MiB an epoch for 40 epochs with a limit 200 MiB above its
start, with ``MemoryCallback(action="warn")`` (before: it runs on past the limit) against
``action="stop"`` (after), for the Trainer and for Lightning.

    .venv/bin/python bench/framework_loops.py --part keras
    .venv/bin/python bench/framework_loops.py --part trainer
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "frameworks"
MiB = 2**20
FITS = 30
SKIP = 5

CHILD = """
import json, sys, time, psutil
import trainguard
from trainguard import frameworks
from trainguard.workloads import keras_fit
mode, fits = sys.argv[1], int(sys.argv[2])
process = psutil.Process()
rss, seconds = [], []
for i in range(fits):
    start = time.perf_counter()
    if mode == "scope":
        with trainguard.scope(census=False):
            keras_fit({"seed": i})
    else:
        keras_fit({"seed": i})
        if mode == "cleanup":
            frameworks.cleanup()
    seconds.append(time.perf_counter() - start)
    rss.append(process.memory_info().rss)
print(json.dumps({"rss": rss, "seconds": seconds, "loaded": frameworks.loaded()}))
"""


def keras_part() -> None:
    from trainguard.leaks.stats import robust_slope

    print(
        f"{FITS} fits of keras_fit's default model per backend and mode; growth over fits {SKIP}..{FITS - 1}"
    )
    print(
        "| backend | mode | growth per fit [95 % interval] | RSS after fit 5 -> 30 | s per fit | frameworks loaded |"
    )
    print("|---|---|---:|---:|---:|---|")
    for backend in ("jax", "tensorflow", "torch"):
        for mode in ("as is", "cleanup", "scope"):
            env = {
                **os.environ,
                "KERAS_BACKEND": backend,
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "JAX_PLATFORMS": "cpu",
            }
            out = subprocess.run(
                [sys.executable, "-c", CHILD, mode, str(FITS)],
                capture_output=True,
                text=True,
                env=env,
                timeout=1800,
            )
            if out.returncode != 0:
                print(f"| {backend} | {mode} | failed: {out.stderr.strip().splitlines()[-1:]} |")
                continue
            data = json.loads(out.stdout.strip().splitlines()[-1])
            rss = data["rss"][SKIP:]
            est = robust_slope(rss, confidence=0.95)
            seconds = sorted(data["seconds"][SKIP:])[len(rss) // 2]
            print(
                f"| {backend} | {mode} | {est.slope / MiB:+.2f} MiB [{est.ci_low / MiB:+.2f}, {est.ci_high / MiB:+.2f}] "
                f"| {rss[0] / MiB:.0f} -> {rss[-1] / MiB:.0f} MiB | {seconds:.2f} | {', '.join(data['loaded'])} |",
                flush=True,
            )


def _search(mode: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        out = subprocess.run(
            [sys.executable, str(TESTS / "hf_search_child.py"), mode, out_dir],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    data = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    data["wall_s"] = time.perf_counter() - start
    return data


def _watched(models: str) -> list[dict]:
    from trainguard.runner import Runner

    grid = [
        {"epochs": 40, "leak_mib": 20, "action": action, "margin_mib": 200} for action in ("warn", "stop")
    ]
    with Runner(store=None, threads=1, policy=None) as runner:
        return [r.value for r in runner.map(f"{TESTS / models}:fit_watched", grid)]


def trainer_part() -> None:
    guarded, plain = _search("guarded"), _search("inprocess")
    print("Trainer search, 10 trials (caller's own RSS after trial 1 -> 10):")
    for name, data in (("in the caller (Trainer.hyperparameter_search)", plain), ("guarded", guarded)):
        rss = data["rss"]
        print(
            f"  {name}: {rss[0] / MiB:.0f} -> {rss[-1] / MiB:.0f} MiB, imported {data['loaded'] or 'no framework'}, "
            f"{data['wall_s']:.1f} s, best trial {data['best']['run_id']} {data['best']['params']}"
        )
    print("A fit keeping 20 MiB an epoch, 40 epochs, limit 200 MiB over its start:")
    for framework, models in (("Trainer", "hf_models.py"), ("Lightning", "lightning_models.py")):
        for row in _watched(models):
            action = "stop" if row["stopped_epoch"] is not None else "warn"
            over = max(row["peak"]) - row["limit"]
            print(
                f"  {framework} action={action}: {row['epochs_run']} epochs, peak {max(row['peak']) / MiB:.0f} MiB, "
                f"limit {row['limit'] / MiB:.0f} MiB ({over / MiB:+.0f} MiB), warnings {len(row['warnings'])}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("keras", "trainer"), required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    keras_part() if args.part == "keras" else trainer_part()


if __name__ == "__main__":
    main()
