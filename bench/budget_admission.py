"""The two memory-budget rows of bench/peak_prediction.py (44 trials, 2 workers, 1.2GB), history
admission against per-trial admission, with what the wall time alone does not say: the
supervisor's CPU, the gap between a worker's trial ending and its next starting (the dispatch
path), and the mean number of trials running at once. A cProfile of the supervisor per row goes
to ``--profile DIR``.

    .venv/bin/python bench/budget_admission.py [--tree PATH] [--hold 0.6] [--rounds 2]

``--tree`` runs another checkout's ``src`` (and its ``tests/integration/peak_trials.py``), so two
versions can be measured side by side on the same machine.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(predict: bool, params: list[dict], profile_dir: Path | None) -> dict:
    from peak_prediction import FN

    from trainguard import Policy, Runner
    from trainguard.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs.db"
        prof = cProfile.Profile()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        prof.enable()
        Runner(store=store, workers=2, memory_budget="1.2GB", policy=Policy(predict_peaks=predict)).map(
            FN, params, name="bench"
        )
        prof.disable()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        with Store(store, readonly=True) as s:
            attempts = s.attempts(s.get_run("bench").run_id)
    by_worker: dict[int, list] = {}
    for a in sorted(attempts, key=lambda a: a.started_at):
        by_worker.setdefault(a.worker_id, []).append(a)
    gaps = sorted(
        b.started_at - a.finished_at for v in by_worker.values() for a, b in pairwise(v) if a.finished_at
    )
    busy = sum((a.finished_at or 0) - a.started_at for a in attempts)
    span = max(a.finished_at or 0 for a in attempts) - min(a.started_at for a in attempts)
    if profile_dir is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
        (profile_dir / f"budget_admission_{'per_trial' if predict else 'history'}.txt").write_text(
            out.getvalue()
        )
    return {
        "admission": "per-trial" if predict else "history",
        "wall_s": round(wall, 2),
        "supervisor_cpu_s": round(cpu, 2),
        "dispatch_gap_median_ms": round(1000 * gaps[len(gaps) // 2], 1) if gaps else None,
        "dispatch_gap_sum_s": round(sum(gaps), 2),
        "mean_running": round(busy / span, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default=str(HERE.parent), help="the checkout whose src runs")
    parser.add_argument("--hold", type=float, default=0.6, help="seconds each trial holds its memory")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", default=None, help="a folder for the supervisor's profiles")
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    sys.path[:0] = [str(tree / "src"), str(tree / "bench")]
    from peak_prediction import grid

    params = [p for p in grid(0, args.hold) if p["width"] * p["batch_size"] < 16384]
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(args.rounds):
        for predict in (False, True):
            print(json.dumps({"tree": str(tree), **one(predict, params, profile_dir)}), flush=True)


if __name__ == "__main__":
    main()
