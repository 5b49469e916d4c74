"""Many small fits: a GridSearchCV on joblib's loky, trainguard's and the sequential backend.

    .venv/bin/python bench/joblib_small_tasks.py                 # about a minute on 2 shared cores
    .venv/bin/python bench/joblib_small_tasks.py --repeats 3 --json out.json
    .venv/bin/python bench/joblib_small_tasks.py --profile       # cProfile of the caller, trainguard case

Cases: ``GridSearchCV(Ridge(), 40 alphas, cv=5)`` (200 fits of a linear model, each about a
millisecond) and ``GridSearchCV(RandomForestClassifier(n_estimators=5), 40 points, cv=5)``
(200 fits of a small tree ensemble). Each search runs on loky (``n_jobs=2``), trainguard
(``n_jobs=2``, every batch of tasks one guarded trial: memory sampled, killable, limits enforced)
and the sequential backend (``n_jobs=1``); the scores are checked equal to loky's. Each figure is
the median of ``--repeats`` runs of the whole search, each in its own ``Parallel`` call (loky
keeps its workers between calls; trainguard starts its workers for each call, and that start is
counted once, in the first call; later calls find them warm, kept between calls as loky keeps
its own). ``--cold`` also times each backend's first search in a fresh process (workers started
and scikit-learn imported in them, for loky as for trainguard). ``--profile`` prints the caller's cProfile of one trainguard search, by cumulative
time, and the tasks' own time as the workers measured it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import joblib
import numpy as np
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV

import trainguard.joblib


def cases() -> dict[str, tuple[Any, dict[str, list[Any]], np.ndarray, np.ndarray]]:
    Xr, yr = make_regression(n_samples=300, n_features=20, noise=2.0, random_state=0)
    Xc, yc = make_classification(n_samples=300, n_features=20, random_state=0)
    return {
        "Ridge, 40 alphas x 5 folds": (Ridge(), {"alpha": list(np.logspace(-3, 3, 40))}, Xr, yr),
        "RandomForest(5 trees), 40 points x 5 folds": (
            RandomForestClassifier(n_estimators=5, random_state=0),
            {"max_depth": [2, 3, 4, 5, 6, 7, 8, None], "min_samples_leaf": [1, 2, 3, 4, 5]},
            Xc,
            yc,
        ),
    }


def search(estimator: Any, grid: dict[str, list[Any]], X: Any, y: Any, backend: str) -> tuple[float, Any]:
    n_jobs = 1 if backend == "sequential" else 2
    start = time.perf_counter()
    with joblib.parallel_backend(backend, n_jobs=n_jobs):
        fitted = GridSearchCV(estimator, grid, cv=5).fit(X, y)
    return time.perf_counter() - start, fitted.cv_results_["mean_test_score"]


def profile(estimator: Any, grid: dict[str, list[Any]], X: Any, y: Any) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    search(estimator, grid, X, y, "trainguard")
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(35)


def cold(label: str, backend: str) -> float:
    """The wall of ``backend``'s first search of case ``label`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--first", backend, "--case", label],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default="loky,trainguard,sequential")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--first", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    trainguard.joblib.register()
    found = cases()
    if args.first:
        print(search(*found[args.case], args.first)[0])
        return 0
    if args.profile:
        for estimator, grid, X, y in found.values():
            profile(estimator, grid, X, y)
        return 0
    backends = args.backends.split(",")
    rows: dict[str, dict[str, float]] = {}
    for label, (estimator, grid, X, y) in found.items():
        search(estimator, grid, X, y, "loky")  # loky's workers started once, as a session's are
        walls: dict[str, list[float]] = {b: [] for b in backends}
        reference = None
        for _ in range(args.repeats):
            for backend in backends:
                wall, scores = search(estimator, grid, X, y, backend)
                walls[backend].append(wall)
                if reference is None:
                    reference = scores
                elif not np.allclose(scores, reference, rtol=0, atol=0, equal_nan=True):
                    raise SystemExit(f"{label}: {backend}'s scores differ from {backends[0]}'s")
        rows[label] = {b: statistics.median(w) for b, w in walls.items()}
        line = ", ".join(f"{b} {s:.2f} s" for b, s in rows[label].items())
        if "loky" in rows[label] and "trainguard" in rows[label]:
            line += f"; trainguard/loky {rows[label]['trainguard'] / rows[label]['loky']:.2f} x"
        print(f"{label}: {line}", flush=True)
        if args.cold:
            first = {b: cold(label, b) for b in backends}
            rows[label + ", first search in a fresh process"] = first
            line = ", ".join(f"{b} {s:.2f} s" for b, s in first.items())
            if "loky" in first and "trainguard" in first:
                line += f"; trainguard/loky {first['trainguard'] / first['loky']:.2f} x"
            print(f"{label}, first search in a fresh process: {line}", flush=True)
    if args.json:
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "python": platform.python_version(),
            "joblib": joblib.__version__,
            "repeats": args.repeats,
            "median_wall_s": rows,
        }
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
