"""CPU cost of the Sampler thread at 10 Hz and 100 Hz, as a fraction of one core.

Side by side in one run: for each configuration the process sleeps a fixed time while the sampler
runs, and the process CPU time spent over that window is the sampler's cost (the main thread only
sleeps). The sampler's own thread clock (``Sampler.thread_cpu_s``) is reported as a second view.
A baseline window with no sampler measures what the idle process costs by itself.

    .venv/bin/python bench/sampler_overhead.py [--window 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
from pathlib import Path

import psutil

from trainguard import __version__
from trainguard.sampling import Sampler


def _window(seconds: float, interval_s: float | None, probes: list[str]) -> dict:
    proc = psutil.Process()
    sampler = Sampler(probes, interval_s=interval_s).start() if interval_s else None
    cpu0 = sum(proc.cpu_times()[:2])
    wall0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - wall0
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    samples = thread_cpu = 0
    if sampler is not None:
        sampler.close()
        samples = len(sampler.timeline)
        thread_cpu = sampler.thread_cpu_s
    return {
        "interval_s": interval_s,
        "probes": probes,
        "wall_s": wall,
        "process_cpu_s": cpu,
        "process_core_fraction": cpu / wall,
        "thread_cpu_s": thread_cpu,
        "thread_core_fraction": thread_cpu / wall,
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=10.0, help="seconds per configuration")
    args = parser.parse_args()
    configs = [
        ("no sampler", None, ["rss_bytes"]),
        ("10 Hz, rss_bytes (tree)", 0.1, ["rss_bytes"]),
        ("100 Hz, rss_bytes (tree)", 0.01, ["rss_bytes"]),
        ("10 Hz, process_rss_bytes", 0.1, ["process_rss_bytes"]),
        ("100 Hz, process_rss_bytes", 0.01, ["process_rss_bytes"]),
    ]
    rows = []
    for label, interval, probes in configs:
        result = _window(args.window, interval, probes)
        result["label"] = label
        rows.append(result)
    base = rows[0]["process_core_fraction"]
    print(
        f"Sampler CPU cost, {args.window:g} s window each; trainguard {__version__}, "
        f"Python {platform.python_version()}, psutil {psutil.__version__}, {dt.date.today()}\n"
    )
    print(
        "| configuration | samples | process CPU, % of one core | minus no-sampler baseline | sampler thread CPU, % of one core |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['label']} | {r['samples']} | {100 * r['process_core_fraction']:.3f} % | "
            f"{100 * (r['process_core_fraction'] - base):.3f} % | {100 * r['thread_core_fraction']:.3f} % |"
        )
    out = Path(__file__).with_name("results") / "sampler_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"date": str(dt.datetime.now()), "window_s": args.window, "rows": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
