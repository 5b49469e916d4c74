"""Size and speed of ``trainguard report`` for runs of 40, 1,000 and 10,000 trials.

Each run is synthetic but written through the real Store API, as the supervisor writes it: workers
sampled at 10 Hz (the store buckets and max-pools the samples as it does for a real run), a recycle
every 8 trials per worker, a kill at the memory limit every 97 trials, one failed trial in 50, one
spike per run that must survive downsampling. For each run the benchmark times the report's
rendering (store read + HTML), then opens the file in headless Chromium three times and takes the
median time to a drawn, interactive page (navigation start to the page's script having built the
tables), and checks that the page made no request and logged no error.

    .venv/bin/python bench/report_size.py                 # 40, 1,000 and 10,000 trials (~3 minutes)
    .venv/bin/python bench/report_size.py --trials 1000   # one size
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

MIB = 2**20
SIZES = {40: (2, 600.0), 1000: (8, 3600.0), 10000: (8, 4 * 3600.0)}  # trials: (workers, wall seconds)


def make_store(path: Path, trials: int, workers: int, wall_s: float, seed: int = 0) -> tuple[str, int]:
    """Write a run like the supervisor would; return (run name, spike bytes)."""
    from trainguard.store import Store

    rng = random.Random(seed)
    limit = 2048 * MIB
    per_trial_s = wall_s * workers / trials
    params = [
        {"lr": 10 ** -rng.uniform(1, 4), "units": rng.choice([64, 128, 256, 512]), "seed": i}
        for i in range(trials)
    ]
    name = f"synthetic-{trials}"
    spike_trial = trials // 2
    spike = int(1900 * MIB)
    with Store(path) as store:
        run = store.begin_run(
            name,
            "train.py:train",
            params,
            {"policy": {"memory_limit": limit, "max_trials_per_worker": 8}, "workers": workers, "threads": 1},
        )
        t0 = time.time() - wall_s
        next_worker = 0
        slot_worker: dict[int, int] = {}
        slot_trials: dict[int, int] = {}
        for slot in range(workers):
            slot_worker[slot] = next_worker
            slot_trials[slot] = 0
            store.start_worker(run.run_id, next_worker, 10000 + next_worker, {"slot": slot})
            next_worker += 1
        for index in range(trials):
            slot = index % workers
            wid = slot_worker[slot]
            start = t0 + (index // workers) * per_trial_s
            n = max(2, int(per_trial_s * 10))
            base = 600 * MIB + slot_trials[slot] * 10 * MIB
            killed = index % 97 == 96
            samples = []
            for k in range(n):
                t = start + k * per_trial_s / n
                bump = 120 * MIB * math.sin(math.pi * k / n) + rng.uniform(0, 8 * MIB)
                rss = int(base + bump + (k / n) * (1400 * MIB if killed else 0))
                if index == spike_trial and k == n // 3:
                    rss = spike
                samples.append((t, rss, None, None))
            store.add_samples(run.run_id, wid, samples)
            store.start_attempt(run.run_id, index, 1, wid)
            peak = max(s[1] for s in samples)
            if killed:
                status = "killed_memory"
                error = {
                    "status": status,
                    "message": f"killed at the memory limit: tree RSS {peak} > {limit}",
                }
            elif index % 50 == 49:
                status = "exception"
                error = {"status": status, "type": "ValueError", "message": "ValueError: loss is NaN"}
            else:
                status, error = "ok", None
            value = {"loss": rng.random(), "accuracy": rng.random()} if error is None else None
            store.finish_attempt(
                run.run_id, index, 1, status=status, error=error, peak_rss_bytes=peak, duration_s=per_trial_s
            )
            store.finish_trial(
                run.run_id,
                index,
                status="ok" if error is None else "failed",
                value=value,
                error=error,
                attempts=1,
                peak_rss_bytes=peak,
                worker_id=wid,
                duration_s=per_trial_s,
            )
            if killed:
                store.end_worker(
                    run.run_id, wid, reason="killed_memory", detail={"rss_bytes": peak, "limit_bytes": limit}
                )
            slot_trials[slot] += 1
            if killed or slot_trials[slot] == 8:
                if not killed:
                    store.end_worker(
                        run.run_id,
                        wid,
                        reason="recycled",
                        detail={
                            "rule": "max_trials",
                            "why": "ran 8 trials (max_trials_per_worker=8)",
                            "trials": 8,
                        },
                    )
                    store.add_event(
                        run.run_id, "recycle", f"worker {wid} recycled after 8 trials", worker_id=wid
                    )
                slot_worker[slot] = next_worker
                slot_trials[slot] = 0
                store.start_worker(run.run_id, next_worker, 10000 + next_worker, {"slot": slot})
                next_worker += 1
        for slot in range(workers):
            store.end_worker(
                run.run_id, slot_worker[slot], reason="shutdown", detail={"trials": slot_trials[slot]}
            )
        store.finish_run(run.run_id, "completed")
    return name, spike


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, action="append", help="one of 40, 1000, 10000 (repeatable)")
    args = parser.parse_args()
    from browser import launch, open_file

    from trainguard import __version__

    t = time.perf_counter()
    from trainguard.leaks import stats  # noqa: F401 - scipy's import (seconds), timed apart
    from trainguard.report import render_run_html, write_html

    import_s = time.perf_counter() - t
    from trainguard.store import Store

    sizes = args.trials or sorted(SIZES)
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; trainguard {__version__}; Python {platform.python_version()}"
    )
    pw, browser = launch()
    print(f"Chromium {browser.version}; playwright drives it headless")
    print(
        f"importing the report code (scipy, for the growth intervals) took {import_s:.1f} s, once, not in 'render s'"
    )
    print()
    print(
        "| trials | workers | run length | samples stored | store write s | render s | HTML size | open in Chromium s (median of 3) | spike in the charts' series |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    try:
        with tempfile.TemporaryDirectory() as folder:
            for trials in sizes:
                workers, wall_s = SIZES[trials]
                db = Path(folder) / f"r{trials}.db"
                t = time.perf_counter()
                name, spike = make_store(db, trials, workers, wall_s)
                write_s = time.perf_counter() - t
                t = time.perf_counter()
                with Store(db, readonly=True) as store:
                    html, info = render_run_html(store, name)
                out = write_html(Path(folder) / f"r{trials}.html", html)
                render_s = time.perf_counter() - t
                with Store(db, readonly=True) as store:
                    stored = len(store.samples(info.run_id))
                    # what the charts draw from (tests check the chart keeps its highest point)
                    kept = spike in {s.rss_bytes for s in store.sample_envelope(info.run_id, buckets=1800)}
                loads = []
                for _ in range(3):
                    opened = open_file(browser, out)
                    # from navigation start to the second frame painted after the page's script has
                    # built every table (so parsing, layout of the SVG charts and painting are in it)
                    painted_ms = opened.page.evaluate(
                        "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
                    )
                    loads.append(painted_ms / 1000.0)
                    assert not opened.errors and not opened.other_requests, (
                        opened.errors,
                        opened.other_requests,
                    )
                    assert opened.page.locator("[data-table='trials'] tbody tr").count() == min(trials, 500)
                    opened.page.context.close()
                size = os.path.getsize(out)
                print(
                    f"| {trials:,} | {workers} | {wall_s / 60:g} min | {stored:,} | {write_s:.1f} | {render_s:.2f} | "
                    f"{size / 1e6:.2f} MB | {statistics.median(loads):.2f} | {'yes' if kept else 'NO'} |",
                    flush=True,
                )
    finally:
        browser.close()
        pw.stop()


if __name__ == "__main__":
    main()
