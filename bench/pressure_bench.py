"""Benchmark: work lost per memory kill on the same leaking training, with and without a soft limit,
measured side by side in one run.

    .venv/bin/python bench/pressure_bench.py             # about 1-2 minutes on 2 busy cores

The training is tests/integration/pressure_trials.py:leaky_training: 22 epochs of 0.3 s, each
keeping 40 MiB, under memory_limit=700MB; it cannot finish in one worker. Three ways to run it:

- ``hard limit only``: no checkpoints; killed at the limit, retried (retries=2): every kill loses the
  whole attempt.
- ``checkpoint every 5 epochs, retry``: what users write instead (a fixed interval and a retry on
  the kill; trainguard's own stage rules off: ``predictive=False``); a kill loses the epochs since
  the last checkpoint.
- ``every 5 epochs + stage rules``: the same checkpoints with the staged trials' default rules, which
  move the trial to a fresh worker at a checkpoint when the next stage is predicted to cross the
  limit.
- ``soft_limit=450MB``: the trial checkpoints when ``ctx.under_pressure`` is set and a fresh worker
  carries it on; no kill.

Work lost per kill: the killed attempt's seconds after its last committed checkpoint (or its start).
Writes bench/results/pressure_bench.json.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = str(HERE.parent / "tests" / "integration" / "pressure_trials.py") + ":leaky_training"
PARAMS = {"epochs": 22, "keep_mib": 40, "epoch_s": 0.3}


def _measure(db: Path, name: str, policy_kwargs: dict, params: dict) -> dict:
    from trainguard.runner import Policy, Runner
    from trainguard.store import Store

    start = time.perf_counter()
    with Runner(store=db, policy=Policy(memory_limit="700MB", **policy_kwargs)) as runner:
        (result,) = runner.map(TRAIN, [params], name=name)
    wall = time.perf_counter() - start
    with Store(db, readonly=True) as store:
        run = store.get_run(name).run_id
        attempts = store.attempts(run)
        stages = store.stages(run)
        pressure = store.events(run, kinds=["pressure"])
    lost = []
    for a in attempts:
        if a.status != "killed_memory":
            continue
        marks = [s.time for s in stages if s.attempt == a.attempt and s.event in ("checkpoint", "resume")]
        lost.append((a.finished_at or a.started_at) - max([a.started_at, *marks]))
    return {
        "status": result.status,
        "wall_s": round(wall, 2),
        "attempts": [a.status for a in attempts],
        "kills": len(lost),
        "work_lost_per_kill_s": round(sum(lost) / len(lost), 2) if lost else 0.0,
        "work_lost_total_s": round(sum(lost), 2),
        "pressures": len(pressure),
        "pressure_wait_s": [round(float(e.data.get("waited_s", 0)), 2) for e in pressure],
    }


def main() -> int:
    import trainguard

    tmp = Path(tempfile.mkdtemp(prefix="trainguard-pressure-bench-"))
    try:
        db = tmp / "bench.db"
        every5 = {**PARAMS, "listen": False, "checkpoint_at": [5, 10, 15, 20]}
        rows = {
            "hard limit only": _measure(db, "hard", {"retries": 2}, {**PARAMS, "listen": False}),
            "checkpoint every 5 epochs, retry": _measure(
                db, "interval", {"retries": 3, "predictive": False}, every5
            ),
            "every 5 epochs + stage rules": _measure(db, "staged", {"retries": 3}, every5),
            "soft_limit=450MB": _measure(db, "soft", {"soft_limit": "450MB"}, PARAMS),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "trainguard": trainguard.__version__,
        "machine": platform.platform(),
        "rows": rows,
    }
    for label, row in rows.items():
        print(
            f"{label:34s} {row['status']:7s} wall {row['wall_s']:6.1f} s  kills {row['kills']}  "
            f"lost/kill {row['work_lost_per_kill_s']:5.2f} s  lost total {row['work_lost_total_s']:5.2f} s  "
            f"pressures {row['pressures']}  attempts {row['attempts']}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "pressure_bench.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
