"""The demo's "same params" rows show the same loss: keras_fit seeds the model's initialisation
and fit's shuffling, not only its data (the demo's rows differed from fit to fit)."""

from __future__ import annotations

from _needs import needs

needs("keras")
needs("tensorflow")


def test_the_same_params_fit_to_the_same_loss_in_one_process():
    from trainguard.workloads import keras_fit

    params = {"units": 16, "rows": 256, "features": 20, "epochs": 1, "batch_size": 32}
    first, second = keras_fit(params), keras_fit(params)
    assert first["loss"] == second["loss"] and first["accuracy"] == second["accuracy"]
    assert keras_fit({**params, "seed": 1})["loss"] != first["loss"]  # the seed is what decides
