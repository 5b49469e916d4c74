"""The tools people already call, plain and guarded, side by side in one run.

    python bench/engines_bench.py [--out engines.json]

Cases: GridSearchCV(Ridge(), 4 alphas, cv=5) on joblib's default backend (n_jobs=1) and on
trainguard's (n_jobs=1 and 2); cross_val_score of a leaking scikeras KerasClassifier over 6 folds;
a KerasTuner RandomSearch of 8 trials, plain tuner.search against trainguard.keras_tuner.search.
The Keras cases run in fresh processes (the same child scripts the tests use) and report the
caller's RSS growth and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ROOT / "tests" / "frameworks"
MiB = 2**20


def _child(script: str, *args: str) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, str(FRAMEWORKS / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


def ridge() -> dict:
    import joblib
    import numpy as np
    from sklearn.datasets import make_regression
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV

    import trainguard.joblib

    trainguard.joblib.register()
    X, y = make_regression(n_samples=400, n_features=20, noise=2.0, random_state=0)
    grid = {"alpha": [0.01, 0.1, 1.0, 10.0]}
    start = time.perf_counter()
    ref = GridSearchCV(Ridge(), grid, cv=5, n_jobs=1).fit(X, y)
    rows = {"default n_jobs=1": time.perf_counter() - start}
    for n_jobs in (1, 2):
        start = time.perf_counter()
        with joblib.parallel_backend("trainguard", n_jobs=n_jobs):
            got = GridSearchCV(Ridge(), grid, cv=5).fit(X, y)
        rows[f"trainguard n_jobs={n_jobs}"] = time.perf_counter() - start
        assert np.array_equal(ref.cv_results_["mean_test_score"], got.cv_results_["mean_test_score"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import keras
    import keras_tuner
    import sklearn

    report: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": {
            "python": platform.python_version(),
            "scikit-learn": sklearn.__version__,
            "keras": keras.__version__,
            "keras-tuner": keras_tuner.__version__,
        },
        "ridge_wall_s": ridge(),
    }
    for mode in ("plain", "trainguard"):
        row = _child("scikeras_child.py", mode)
        report[f"scikeras_{mode}"] = {k: row[k] for k in ("caller_growth_bytes", "wall_s", "scores")}
    with tempfile.TemporaryDirectory() as folder:
        for mode in ("plain", "guarded"):
            row = _child("keras_tuner_child.py", mode, str(Path(folder) / mode))
            report[f"keras_tuner_{mode}"] = {
                k: row[k]
                for k in ("caller_growth_bytes", "caller_peak_growth_bytes", "wall_s", "best", "statuses")
            }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
