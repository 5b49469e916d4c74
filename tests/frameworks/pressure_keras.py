"""A Keras fit that keeps ``leak_mib`` per epoch, with ``MemoryCallback(action="checkpoint")``:
under memory pressure it saves the model and optimizer at the end of the epoch and the fit resumes
from there in a fresh worker. Loaded by workers as a file reference."""

from __future__ import annotations

import time

import numpy as np

MiB = 2**20
_KEPT: list = []  # the leak: an array kept per epoch


def fit(params, ctx):
    import keras

    import trainguard.keras

    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.random((512, 16), dtype="float32")
    y = x @ rng.random((16, 1), dtype="float32")
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    memory = trainguard.keras.MemoryCallback(action="checkpoint", count_tensors=False)
    start = memory.restore(model)  # the epoch to resume from (0 on a fresh start)

    class Leak(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            _KEPT.append(np.full(params["leak_mib"] * MiB // 8, float(epoch)))
            time.sleep(params.get("epoch_s", 0.3))

    model.fit(
        x,
        y,
        epochs=params["epochs"],
        initial_epoch=start,
        batch_size=64,
        shuffle=False,
        verbose=0,
        callbacks=[Leak(), memory],
    )
    return {
        "weights": [w.tolist() for w in model.get_weights()],
        "resumed": ctx.resumed,
        "start": start,
        "first_rss": memory.history[0]["rss_bytes"],
    }
