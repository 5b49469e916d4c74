"""Why two workers on two cores do not run twice as fast: per-fit time alone and two at once.

    .venv/bin/python bench/parallel_probe.py            # about 1.5 minutes
    .venv/bin/python bench/parallel_probe.py --fits 4   # quicker

Plain processes (no trainguard in the loop), each importing Keras (TF backend) first and then
timing ``--fits`` calls of ``trainguard.workloads.keras_fit``: one process alone, then two started
together, with TensorFlow's and OpenMP's thread counts left to their defaults and set to 1 (what
the Runner gives 2 workers on 2 cores). A pure-Python loop (no threads, no memory traffic to
speak of) does the same, to separate the machine's own sharing of its cores from TensorFlow's.
The ratio "two at once / alone" of the median per-fit time is what a second worker costs each
worker: 1.0 would mean two workers run twice as fast as one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

THREAD_VARS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "MKL_NUM_THREADS")


def child(kind: str, fits: int) -> None:
    times = []
    if kind == "keras":
        import keras  # noqa: F401 - the import is not timed

        from trainguard.workloads import keras_fit

        keras_fit({})  # the first fit builds what later fits reuse: not timed, as in a reused worker
        for _ in range(fits):
            t = time.perf_counter()
            keras_fit({})
            times.append(time.perf_counter() - t)
    else:
        for _ in range(fits):
            t = time.perf_counter()
            x = 0
            for i in range(6_000_000):
                x += i * i
            times.append(time.perf_counter() - t)
    print(json.dumps(times), flush=True)
    os._exit(0)


def run(kind: str, fits: int, copies: int, threads: int | None) -> list[float]:
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    for var in THREAD_VARS:
        env.pop(var, None)
        if threads is not None:
            env[var] = str(threads)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", kind, str(fits)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for _ in range(copies)
    ]
    out: list[float] = []
    for proc in procs:
        line = proc.stdout.read().strip().splitlines()[-1]
        proc.wait()
        out.extend(json.loads(line))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=6)
    args = parser.parse_args(argv)
    rows = []
    for kind, threads in (("python", None), ("keras", None), ("keras", 1)):
        alone = statistics.median(run(kind, args.fits, 1, threads))
        both = statistics.median(run(kind, args.fits, 2, threads))
        rows.append((kind, threads, alone, both))
    print(f"per-fit median over {args.fits} fits per process ({time.strftime('%Y-%m-%d %H:%M')})")
    print("| work | threads per process | alone s | two at once s | two / alone | speed-up of two |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for kind, threads, alone, both in rows:
        label = "pure-Python loop" if kind == "python" else "keras_fit (TF)"
        print(
            f"| {label} | {'default' if threads is None else threads} | {alone:.3f} | {both:.3f} | "
            f"{both / alone:.2f} | {2 * alone / both:.2f} x |"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    sys.exit(main())
