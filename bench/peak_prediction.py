"""Peak prediction, side by side in one run: the same 50-trial sweep whose peak grows with
width x batch size (6 configs over the limit), without and with the peak model.

    .venv/bin/python bench/peak_prediction.py [--out bench/results/peak_prediction.json]

Rows: memory kills and wall time under memory_limit=460MB (today's behaviour is
predict_peaks=False); every trial ok with on_oom=Shrink; the median prediction error after the
first ten trials; and under memory_budget=1.2GB with 2 workers, the wall time with per-trial
admission against the history-based admission, and the highest sampled sum of the workers'
trees against the budget.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from trainguard import Policy, Runner, Shrink  # noqa: E402
from trainguard.store import Store  # noqa: E402

FN = f"{HERE.parent / 'tests' / 'integration' / 'peak_trials.py'}:activations"


def grid(seed: int, hold_s: float) -> list[dict]:
    out = [
        {"width": w, "batch_size": b, "seed": s, "hold_s": hold_s}
        for w in (8, 16, 32, 64, 128)
        for b in (16, 32, 64, 128, 256)
        for s in range(2)
    ]
    random.Random(seed).shuffle(out)
    return out


def one(label: str, params: list[dict], **runner_kwargs) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs.db"
        start = time.perf_counter()
        results = Runner(store=store, **runner_kwargs).map(FN, params, name="bench")
        wall = time.perf_counter() - start
        with Store(store, readonly=True) as s:
            run = s.get_run("bench")
            kills = [e for e in s.events(run.run_id) if e.kind == "kill"]
            over = [e for e in s.events(run.run_id) if e.kind == "budget_exceeded"]
    statuses = [r.error.status if r.error else "ok" for r in results]
    late = [r for r in results[10:] if r.ok and r.predicted_peak_bytes]
    errors = sorted(abs(r.predicted_peak_bytes - r.peak_rss_bytes) / r.peak_rss_bytes for r in late)
    return {
        "label": label,
        "wall_s": round(wall, 1),
        "ok": statuses.count("ok"),
        "memory_kills": len(kills),
        "not_started": statuses.count("predicted_over_limit"),
        "budget_exceeded_events": len(over),
        "median_prediction_error": round(errors[len(errors) // 2], 3) if errors else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(HERE / "results" / "peak_prediction.json"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        params = grid(seed, 0.15)
        for predict in (False, True):
            tag = "with prediction" if predict else "without (today)"
            rows.append(
                {
                    "seed": seed,
                    **one(
                        f"limit 460MB, {tag}",
                        params,
                        workers=1,
                        policy=Policy(memory_limit="460MB", predict_peaks=predict),
                    ),
                }
            )
            rows.append(
                {
                    "seed": seed,
                    **one(
                        f"limit 460MB + Shrink, {tag}",
                        params,
                        workers=1,
                        policy=Policy(
                            memory_limit="460MB",
                            predict_peaks=predict,
                            on_oom=Shrink("batch_size", minimum=4),
                        ),
                    ),
                }
            )
        small = [p for p in grid(seed, 0.6) if p["width"] * p["batch_size"] < 16384]
        for predict in (False, True):
            tag = "per-trial admission" if predict else "history admission (today)"
            rows.append(
                {
                    "seed": seed,
                    **one(
                        f"budget 1.2GB, 2 workers, {tag}",
                        small,
                        workers=2,
                        memory_budget="1.2GB",
                        policy=Policy(predict_peaks=predict),
                    ),
                }
            )
    for row in rows:
        print(json.dumps(row))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
