"""Benchmark: repeated Keras fits on TensorFlow with and without the release of the graphs that
``tf.custom_gradient`` pins in TensorFlow's gradient registry (``frameworks.cleanup``'s
``tf_custom_gradients`` step, what Runner workers and ``scope()`` do by default).

    .venv/bin/python bench/tf_gradients_bench.py              # 32 fits per configuration
    .venv/bin/python bench/tf_gradients_bench.py --fits 12    # for development

Two workloads: the demo's (``trainguard.workloads.keras_fit`` defaults) and the leak corpus's
``keras_tf_fit_loop`` step. Each runs in a fresh interpreter per setting, one after the other in
this one run: a seeded fit, then ``trainguard.frameworks.cleanup(tf_custom_gradients=...)``
(``clear_session()`` + the release or not + ``gc.collect()`` + ``malloc_trim``); after each fit it
reads the process's RSS and counts the live ``Operation``s. The slope per fit (Theil-Sen with the
95 % interval of ``trainguard.leaks.stats.robust_slope``) skips the first 3 fits (warm-up). It
also checks that every fit's loss equals the first fit's in a fresh process (seeded), with and
without the release. Prints a markdown table; raw figures go to bench/results/tf_gradients_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import gc, json, os, sys, time
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    from trainguard import frameworks
    workload, release, fits = sys.argv[1], sys.argv[2] == "on", int(sys.argv[3])
    if workload == "demo":
        from trainguard.workloads import keras_fit
        def fit():
            return keras_fit({"clear_session": False})["loss"]
    else:
        sys.path.insert(0, os.path.join(os.getcwd(), "bench", "leak_corpus"))
        import numpy as np
        np.random.seed(0)  # the case draws its data at import: the same data in every process
        import keras_tf_fit_loop as case
        def fit():
            model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(256, activation="relu"),
                                      keras.layers.Dense(1)])
            model.compile(optimizer="adam", loss="mse")
            return float(model.fit(case.X, case.Y, epochs=1, batch_size=64, verbose=0).history["loss"][-1])
    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
    rows = []
    for i in range(fits):
        keras.utils.set_random_seed(0)
        t0 = time.perf_counter()
        loss = fit()
        fit_s = time.perf_counter() - t0
        steps = frameworks.cleanup(tf_custom_gradients=release)
        ops = sum(1 for o in gc.get_objects() if type(o).__name__ == "Operation")
        rows.append({"loss": loss, "fit_s": fit_s, "cleanup": steps, "rss_bytes": rss(), "operations": ops})
    print(json.dumps(rows))
    """
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=32)
    args = parser.parse_args()
    from trainguard.leaks.stats import robust_slope, theil_sen

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="2")
    out: dict[str, dict[str, list[dict]]] = {}
    skip = 3
    for workload in ("demo", "corpus"):
        out[workload] = {}
        for setting in ("off", "on"):
            start = time.time()
            res = subprocess.run(
                [sys.executable, "-c", CHILD, workload, setting, str(args.fits)],
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
            )
            if res.returncode != 0:
                print(res.stderr[-3000:], file=sys.stderr)
                return 1
            out[workload][setting] = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"{workload} {setting}: {time.time() - start:.0f} s", file=sys.stderr)
    import keras
    import tensorflow as tf

    print(
        f"\n{args.fits} fits per configuration, slopes over fits {skip + 1}..{args.fits}; "
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {time.strftime('%Y-%m-%d')}\n"
    )
    print(
        "| workload | release | MiB / fit (95 % interval) | Operations / fit | live Operations at the end "
        "| RSS at the end | release per fit | losses equal to a fresh process's first |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    summary = {}
    for workload, settings in out.items():
        first = settings["off"][0]["loss"]
        for setting, rows in settings.items():
            rss = [r["rss_bytes"] / 2**20 for r in rows][skip:]
            ops = [r["operations"] for r in rows][skip:]
            s = robust_slope(rss)
            ops_slope = theil_sen(ops)
            release_ms = [1000 * r["cleanup"].get("tf_custom_gradients", 0.0) for r in rows]
            same = sum(r["loss"] == first for r in rows)
            summary[f"{workload}/{setting}"] = {
                "mib_per_fit": s.slope,
                "ci": [s.ci_low, s.ci_high],
                "ops_per_fit": ops_slope,
                "ops_end": ops[-1],
                "rss_end_mib": rss[-1],
                "same_loss": same,
            }
            release = f"{sorted(release_ms)[len(release_ms) // 2]:.1f} ms" if setting == "on" else "-"
            print(
                f"| {workload} | {setting} | {s.slope:+.2f} ({s.ci_low:+.2f} .. {s.ci_high:+.2f}) "
                f"| {ops_slope:+,.0f} | {ops[-1]:,} | {rss[-1]:.0f} MiB | {release} | {same}/{len(rows)} |"
            )
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "tf_gradients_bench.json").write_text(json.dumps({"summary": summary, "raw": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
