"""KerasTuner searches guarded by trainguard: each trial's build-and-fit in a supervised worker.

::

    import keras_tuner
    import trainguard.keras_tuner

    tuner = keras_tuner.RandomSearch(build_model, objective="val_loss", max_trials=8, seed=1,
                                     directory="tuning", project_name="mlp")
    trainguard.keras_tuner.search(tuner, x, y, epochs=3, validation_split=0.2,
                                  guard={"memory_limit": "4GB"})
    best = tuner.get_best_hyperparameters()[0]

or, for people who subclass a tuner::

    class GuardedSearch(trainguard.keras_tuner.GuardedTunerMixin, keras_tuner.RandomSearch):
        trainguard_options = {"memory_limit": "4GB"}

The oracle, its directory, resuming and ``get_best_*`` work as with ``tuner.search``. A trial
killed for memory (or a timeout, or a crash) ends FAILED with the cause in its message and is
retried only as the oracle's ``max_retries_per_trial`` says.

Importing this module does not import keras_tuner; using it without keras-tuner installed raises
``MissingDependencyError`` naming ``pip install -e '.[keras-tuner]'``.
"""

from __future__ import annotations

from trainguard.integrations.keras_tuner import GuardedTunerMixin, TrialGuard, search

__all__ = ["search", "GuardedTunerMixin", "TrialGuard"]
