"""Where the seed's Keras fit with ``trainguard.frameworks.cleanup()`` (the corpus case
``keras_tf_seed_fit_cleanup``) grows, fit by fit: RSS, the C
allocator's bytes in use, glibc's heaps as resident, RSS outside them, and live memory (bytes in use
plus RSS outside the heaps), with and without ``malloc_trim(0)``.

Run (each a fresh process; about 2 minutes for 80 fits):

    .venv/bin/python bench/seed_heaps_probe.py --fits 80               # cleanup() as shipped
    .venv/bin/python bench/seed_heaps_probe.py --fits 80 --no-trim     # cleanup(malloc_trim=False)
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 .venv/bin/python bench/seed_heaps_probe.py --fits 80

Prints the slope (KiB a fit, least squares) of each series over fits 10-40, 40-N and 10-N, the
residual spread (one standard deviation) of RSS and of RSS outside the heaps, and the last RSS.
With jemalloc glibc's heaps hold nothing and bytes in use are jemalloc's.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


CASE = Path(__file__).resolve().parent / "leak_corpus" / "keras_tf_seed_fit_cleanup.py"


def load_step(trim: bool) -> Callable[[], None]:
    """The corpus case's step (the seed's fit, then ``trainguard.frameworks.cleanup()``); with
    ``trim`` False its cleanup runs with ``malloc_trim=False``."""
    import trainguard.frameworks

    if not trim:
        trainguard.frameworks.cleanup = functools.partial(trainguard.frameworks.cleanup, malloc_trim=False)
    spec = importlib.util.spec_from_file_location("keras_tf_seed_fit_cleanup", CASE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fits", type=int, default=80)
    ap.add_argument("--no-trim", action="store_true", help="cleanup(malloc_trim=False)")
    args = ap.parse_args()
    import numpy as np

    from trainguard.probes.allocator import AllocatorProbe
    from trainguard.probes.heaps import HeapResidency

    step = load_step(trim=not args.no_trim)
    probe = AllocatorProbe()
    heaps = HeapResidency(probe.name)
    page = os.sysconf("SC_PAGE_SIZE")
    rows, costs = [], []
    for i in range(args.fits):
        step()
        gc.collect()
        t0 = time.perf_counter()
        resident = heaps.read() or 0
        costs.append(time.perf_counter() - t0)
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * page
        in_use = probe.read() or 0
        rows.append((i, rss, in_use, resident, rss - resident, rss - resident + in_use))
    a = np.array(rows, dtype=float)
    print(
        f"allocator {probe.name}, heaps {'read' if heaps.available else heaps.reason}; trim {not args.no_trim}"
    )
    print(f"a reading of the heaps: median {np.median(costs) * 1e3:.1f} ms")
    names = ("rss", "bytes in use", "heaps resident", "outside heaps", "live")
    for lo, hi in ((10, 40), (40, args.fits), (10, args.fits)):
        part = a[(a[:, 0] >= lo) & (a[:, 0] < hi)]
        if len(part) < 4:
            continue
        x = part[:, 0]
        slopes = [np.polyfit(x, part[:, c], 1)[0] / 1024 for c in range(1, 6)]
        spread = [np.std(part[:, c] - np.polyval(np.polyfit(x, part[:, c], 1), x)) / 1024 for c in (1, 4)]
        text = ", ".join(f"{n} {s:+.1f}" for n, s in zip(names, slopes, strict=True))
        print(f"fits {lo}-{hi}: {text} KiB/fit; spread: rss {spread[0]:.0f}, outside {spread[1]:.0f} KiB")
    print(f"RSS after the last fit: {a[-1, 1] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
