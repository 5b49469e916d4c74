"""Out-of-memory recovery and the batch-size search on a CPU training whose peak grows with the batch.

    .venv/bin/python bench/oom_recovery.py            # about 1 minute on 2 cores

The workload is ``trainguard.workloads:numpy_fit`` (about 80 KiB of activations per sample, 34 MiB
of interpreter and numpy) under ``memory_limit=350MB``. In one run, side by side:

1. brute force: each size alone in a fresh worker; the largest whose peak stays under the limit;
2. ``Policy(on_oom=Shrink("batch_size", accumulate="grad_accum"))`` asked for 8192 (about twice
   what fits): attempts, the size it finished at, the effective batch, wall time; then a second
   run of the same params, which starts at the remembered size;
3. ``find_batch_size`` from 256: the size, its peak, every probe, wall time, and twice the size
   alone in a fresh worker.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
import time
from pathlib import Path

from trainguard.fitting import find_batch_size
from trainguard.runner import Policy, Runner, Shrink
from trainguard.units import format_bytes

FIT = "trainguard.workloads:numpy_fit"
LIMIT = 350_000_000


def brute_force(sizes: list[int]) -> tuple[int, float, list[tuple[int, str, int | None]]]:
    policy = Policy(memory_limit=LIMIT, peak_ratio=None, max_trials_per_worker=1)
    t0 = time.monotonic()
    with Runner(policy=policy, store=None, sample_interval="20ms") as runner:
        results = runner.map(FIT, [{"batch_size": s, "steps": 1} for s in sizes])
    rows = [
        (s, r.status if r.ok else r.error.status, r.peak_rss_bytes)
        for s, r in zip(sizes, results, strict=True)
    ]
    fits = [s for s, status, peak in rows if status == "ok" and peak is not None and peak <= LIMIT]
    return max(fits), time.monotonic() - t0, rows


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="trainguard-oom-bench-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # scratch: the figures are printed
    store = folder / "oom.db"
    largest, brute_s, rows = brute_force(list(range(2048, 5121, 256)))
    print(f"limit {format_bytes(LIMIT)}; brute force over {len(rows)} sizes in {brute_s:.1f} s:")
    for size, status, peak in rows:
        print(f"  batch_size={size:<5} {status:<14} peak {format_bytes(peak)}")
    print(f"largest size that fits: {largest}\n")

    rule = Shrink("batch_size", factor=0.5, minimum=1, accumulate="grad_accum")
    policy = Policy(memory_limit=LIMIT, peak_ratio=None, on_oom=rule)
    params = [{"batch_size": 8192, "grad_accum": 1}]
    with Runner(policy=policy, store=store, sample_interval="20ms") as runner:
        t0 = time.monotonic()
        (first,) = runner.map(FIT, params, name="first")
        first_s = time.monotonic() - t0
        attempts = runner.store.attempts(runner.store.get_run("first").run_id)
        t0 = time.monotonic()
        (second,) = runner.map(FIT, params, name="second")
        second_s = time.monotonic() - t0
    print("Shrink, asked batch_size=8192:")
    for a in attempts:
        ran = (a.error or {}).get("ran_with") or first.ran_with
        print(
            f"  attempt {a.attempt}: {ran} -> {a.status}, peak {format_bytes(a.peak_rss_bytes)}, worker {a.worker_id}"
        )
    print(
        f"  finished {first.status} at batch_size={first.value['batch_size']} x grad_accum={first.value['grad_accum']} "
        f"= {first.value['effective_batch']} in {first_s:.1f} s ({first.attempts} attempts); "
        f"{largest / first.value['batch_size']:.2f}x below the largest that fits"
    )
    print(
        f"  second run: {second.status} at batch_size={second.value['batch_size']} in {second.attempts} attempt, "
        f"{second_s:.1f} s ({second_s / first_s:.2f}x the first run's time)\n"
    )

    t0 = time.monotonic()
    found = find_batch_size(FIT, {"batch_size": 256}, memory_limit=LIMIT, margin=0.1, store=None)
    fit_s = time.monotonic() - t0
    print(found.summary())
    with Runner(
        policy=Policy(memory_limit=LIMIT, peak_ratio=None), store=None, sample_interval="20ms"
    ) as runner:
        (double,) = runner.map(FIT, [{"batch_size": 2 * found.size, "steps": 1}])
    print(
        f"find_batch_size: {found.size} (peak {format_bytes(found.peak_rss_bytes)} <= budget "
        f"{format_bytes(found.budget_bytes)}), {len(found.probes)} probes, {fit_s:.1f} s wall; "
        f"2 x {found.size} alone: {double.status if double.ok else double.error['status']}, "
        f"peak {format_bytes(double.peak_rss_bytes)} (limit {format_bytes(LIMIT)}); "
        f"{found.size / largest:.2f}x the brute-force largest ({brute_s / fit_s:.2f}x the brute force's time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
