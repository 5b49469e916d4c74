"""Memory as an Optuna constraint, side by side: the same study, the same trial budget, without and
with ``trainguard.optuna.memory_constraints``.

    .venv/bin/python bench/optuna_constraints.py [--trials 40] [--seeds 0 1 2] [--out FILE.json]

The objective (``tests/integration/optuna_objectives.py:allocates``) holds an array of ``mb`` MiB
(8-400) for 0.12 s and scores better the larger ``mb`` is, so an unconstrained study drifts to the
configs that need the most memory. Both studies run guarded under ``Policy(memory_limit="330MB")``
(a kill: a trial over it); the constraint's limit is 200MB, what the target machine can give a
trial. Per study: trials whose measured peak went over 200MB (kills included), kills, the best
value and the best trial's peak (the plain study's best is the best COMPLETE trial, whatever its
memory; the constrained study's is Optuna's ``best_trial``, feasible only), the median error of
``trainguard_predicted_peak_bytes`` after the first ten trials, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))

import optuna  # noqa: E402

import trainguard.optuna as tgo  # noqa: E402
from trainguard import Policy  # noqa: E402

FN = f"{HERE.parent / 'tests' / 'integration' / 'optuna_objectives.py'}:allocates"
LIMIT = "200MB"
MiB = 2**20


def one(label: str, seed: int, trials: int, constrained: bool) -> dict:
    limit = tgo.memory_constraints(LIMIT)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=10)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    start = time.perf_counter()
    tgo.optimize(
        study,
        FN,
        n_trials=trials,
        policy=Policy(memory_limit="330MB"),
        constraints=limit if constrained else None,
        sample_interval="20ms",
    )
    wall = time.perf_counter() - start
    attrs = [t.user_attrs for t in study.trials]
    peak = [a.get("trainguard_peak_rss_bytes") or 0 for a in attrs]
    killed = [a.get("trainguard_status") in ("killed_memory", "os_oom") for a in attrs]
    over = sum(k or p > limit.limit_bytes for k, p in zip(killed, peak, strict=True))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = study.best_trial if constrained else min(complete, key=lambda t: t.value)
    errors = [
        abs(a["trainguard_predicted_peak_bytes"] - a["trainguard_peak_rss_bytes"])
        / a["trainguard_peak_rss_bytes"]
        for a in attrs[10:]
        if a.get("trainguard_predicted_peak_bytes")
        and a.get("trainguard_peak_rss_bytes")
        and not a.get("trainguard_status")
    ]
    return {
        "label": label,
        "seed": seed,
        "trials": len(study.trials),
        "over_limit": over,
        "memory_kills": sum(killed),
        # never run: the whole predicted interval over memory_limit or the constraint's limit
        "not_started": sum(a.get("trainguard_status") == "predicted_over_limit" for a in attrs),
        "best_value": round(best.value, 2),
        "best_peak_mib": round(best.user_attrs["trainguard_peak_rss_bytes"] / MiB),
        "best_feasible": best.user_attrs["trainguard_peak_rss_bytes"] <= limit.limit_bytes,
        "median_prediction_error": round(statistics.median(errors), 3) if errors else None,
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows = []
    for seed in args.seeds:
        for label, constrained in (("plain", False), ("memory_constraints", True)):
            row = one(label, seed, args.trials, constrained)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(
        f"\n{'study':<20} {'seed':>4} {'over 200MB':>10} {'kills':>5} {'not run':>7} {'best':>8} {'best peak':>9} {'pred err':>8} {'wall':>6}"
    )
    for r in rows:
        err = f"{r['median_prediction_error']:.1%}" if r["median_prediction_error"] is not None else "-"
        print(
            f"{r['label']:<20} {r['seed']:>4} {r['over_limit']:>10} {r['memory_kills']:>5} {r['not_started']:>7} {r['best_value']:>8} "
            f"{r['best_peak_mib']:>6} MiB {err:>8} {r['wall_s']:>5}s"
        )
    versions = {"optuna": optuna.__version__, "python": sys.version.split()[0]}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"versions": versions, "rows": rows}, indent=2))
    print(versions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
