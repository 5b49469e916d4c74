"""Child process of test_keras_tuner_guarded: KerasTuner searches, plain or guarded; prints one JSON
line a search.

``python keras_tuner_child.py MODE DIRECTORY`` runs one search in DIRECTORY.
``python keras_tuner_child.py MODE,MODE,... BASE`` runs them one after another in this process, each
in BASE/MODE (``resume`` in BASE/guarded, which it resumes): one TensorFlow import pays for them all.
The guarded searches go first, ``guarded`` the very first (its caller's growth is measured from a
process that has fitted nothing), ``plain`` last (its fits stay in this process).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))

import keras_tuner  # noqa: E402
import psutil  # noqa: E402
import tuner_models as models  # noqa: E402

import trainguard.keras_tuner  # noqa: E402


def _tuner(directory: str, build=models.build, trials: int = 5, cls=keras_tuner.RandomSearch):
    return cls(
        build,
        objective="val_loss",
        max_trials=trials,
        seed=7,
        directory=directory,
        project_name="search",
        overwrite=False,
    )


def _search(mode: str, directory: str, x, y, fit: dict):
    if mode == "plain":
        tuner = _tuner(directory)
        tuner.search(x, y, **fit)
    elif mode == "guarded":
        tuner = _tuner(directory)
        trainguard.keras_tuner.search(tuner, x, y, guard={"memory_limit": "3GB"}, **fit)
    elif mode == "resume":
        tuner = _tuner(directory, trials=7)
        trainguard.keras_tuner.search(tuner, x, y, **fit)
    elif mode == "killed":
        tuner = _tuner(directory, build=models.build_hoarding, trials=2)
        trainguard.keras_tuner.search(tuner, x, y, guard={"memory_limit": "1400MB"}, **fit)
    else:

        class Guarded(trainguard.keras_tuner.GuardedTunerMixin, keras_tuner.RandomSearch):
            trainguard_options = {"memory_limit": "3GB"}

        tuner = _tuner(directory, trials=2, cls=Guarded)
        tuner.search(x, y, **fit)
    return tuner


def run(mode: str, directory: str) -> dict:
    x, y = models.data()
    fit = {"epochs": 2, "validation_split": 0.25, "batch_size": 64, "verbose": 0}
    models.BUILD_RSS.clear()  # this search's builds only, when one process runs several
    proc = psutil.Process()
    before = proc.memory_info().rss
    peak = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], proc.memory_info().rss)

    threading.Thread(target=watch, daemon=True).start()
    start = time.perf_counter()
    tuner = _search(mode, directory, x, y, fit)
    wall = time.perf_counter() - start
    done.set()
    searched = list(models.BUILD_RSS)  # get_best_models below builds in the caller, as it should
    trials = tuner.oracle.trials.values()
    best = tuner.get_best_hyperparameters()[0].values if mode != "killed" else None
    model = tuner.get_best_models()[0] if mode in ("guarded", "mixin") else None
    return {
        "mode": mode,
        "statuses": sorted(t.status for t in trials),
        "messages": [t.message for t in trials if t.message],
        "best": best,
        "best_model_params": model.count_params() if model is not None else None,
        "caller_growth_bytes": proc.memory_info().rss - before,
        "caller_peak_growth_bytes": peak[0] - before,
        "build_rss": searched,
        "wall_s": wall,
    }


def main(modes: str, directory: str) -> None:
    if "," not in modes:
        print(json.dumps(run(modes, directory)), flush=True)
        return
    for mode in modes.split(","):
        folder = os.path.join(directory, "guarded" if mode == "resume" else mode)
        print(json.dumps(run(mode, folder)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
