"""Benchmark: a Keras (TensorFlow backend) training that leaks per epoch, 20 epochs, unstaged in one
worker against staged (the default-style predictive budget moves it to a fresh worker at a
checkpoint), measured side by side in one run.

    .venv/bin/python bench/staged_bench.py               # about 3-4 minutes on 2 busy cores
    .venv/bin/python bench/staged_bench.py --epochs 10

The trial is tests/frameworks/staged_keras.py: each epoch traces a new tf.function that is kept
(about 20 MiB of graph and constants an epoch with --leak-mib 4), fits one epoch, saves its
weights into ctx.checkpoint_path and calls ctx.checkpoint. Peaks are the worker tree's RSS during
each stage, as the supervisor sampled it (10 Hz) and stored in the stages table.
Writes bench/results/staged_bench.json.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = str(HERE.parent / "tests" / "frameworks" / "staged_keras.py") + ":train"
MiB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--leak-mib", type=int, default=4)
    parser.add_argument("--peak-ratio", type=float, default=1.2)
    args = parser.parse_args()
    import keras
    import tensorflow as tf

    import trainguard
    from trainguard.store import Store

    scratch = tempfile.mkdtemp(prefix="staged-bench-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # scratch: the figures are printed
    db = Path(scratch) / "k.db"
    params = [{"epochs": args.epochs, "leak_mib": args.leak_mib}]
    out: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "args": vars(args)}
    rows = {}
    for name, policy in (
        ("unstaged", trainguard.Policy(predictive=False)),
        ("staged", trainguard.Policy(peak_ratio=args.peak_ratio, min_trials_for_slope=2)),
    ):
        start = time.perf_counter()
        with trainguard.Runner(policy=policy, store=db, keras_backend="tensorflow", threads=1) as runner:
            (result,) = runner.map(TRAIN, params, name=name)
        wall = time.perf_counter() - start
        if not result.ok:
            raise SystemExit(f"{name}: {result.error}")
        with Store(db, readonly=True) as store:
            stages = [s for s in store.stages(store.get_run(name).run_id) if s.event == "checkpoint"]
        peaks = [s.peak_rss_bytes for s in stages]
        rows[name] = {
            "wall_s": wall,
            "workers": len({s.worker_id for s in stages}),
            "stage_peaks_mib": [p / MiB for p in peaks],
            "first_stage_peak_mib": peaks[0] / MiB,
            "max_peak_mib": max(peaks) / MiB,
            "max_over_first": max(peaks) / peaks[0],
            "losses": result.value["losses"],
            "weights": result.value["weights"],
        }
    same = (
        rows["staged"]["weights"] == rows["unstaged"]["weights"]
        and rows["staged"]["losses"] == rows["unstaged"]["losses"]
    )
    out.update(
        {
            "rows": rows,
            "same_weights_and_losses": same,
            "versions": {
                "python": platform.python_version(),
                "tensorflow": tf.__version__,
                "keras": keras.__version__,
                "trainguard": trainguard.__version__,
            },
        }
    )
    print(
        f"{'':10} {'workers':>7} {'first stage peak':>17} {'max stage peak':>15} {'max / first':>11} {'wall s':>7}"
    )
    for name, row in rows.items():
        print(
            f"{name:10} {row['workers']:>7} {row['first_stage_peak_mib']:>13.0f} MiB {row['max_peak_mib']:>11.0f} MiB"
            f" {row['max_over_first']:>11.2f} {row['wall_s']:>7.1f}"
        )
    print(f"final weights and per-epoch losses identical: {same}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "staged_bench.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main())
