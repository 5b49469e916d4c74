"""Child process of test_scikeras_joblib: cross_val_score of a leaking KerasClassifier over 6
folds, under trainguard's joblib backend and/or plain, in the order the arguments name them (one
TensorFlow import for both); prints one JSON line, ``{mode: measurements}``."""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import joblib  # noqa: E402
import psutil  # noqa: E402
import scikeras_models as models  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402

import trainguard.joblib  # noqa: E402


def measure(mode: str, X, y) -> dict:
    """One cross_val_score in this process, plain or under trainguard's backend, with the RSS of
    each model this process built (none when every fold ran in a worker)."""
    models.BUILD_RSS.clear()
    proc = psutil.Process()
    before = proc.memory_info().rss
    start = time.perf_counter()
    if mode == "plain":
        scores = cross_val_score(models.classifier(), X, y, cv=6)
    else:
        with joblib.parallel_backend("trainguard", n_jobs=1, memory_limit="3GB"):
            scores = cross_val_score(models.classifier(), X, y, cv=6)
    return {
        "mode": mode,
        "scores": [float(s) for s in scores],
        "caller_growth_bytes": proc.memory_info().rss - before,
        "build_rss": list(models.BUILD_RSS),
        "wall_s": time.perf_counter() - start,
    }


def main(modes: list[str]) -> None:
    trainguard.joblib.register()
    X, y = models.data()
    import keras  # noqa: F401 - the caller of a scikeras search has Keras loaded either way

    print(json.dumps({mode: measure(mode, X, y) for mode in modes}))


if __name__ == "__main__":
    main(sys.argv[1:])
