"""Control: the same Keras loop on the torch backend (flat, but noisy)."""

import gc
import os

os.environ["KERAS_BACKEND"] = "torch"
import keras  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = "no_leak"
SOURCE = "Keras fit of a tiny model (~50 ms) in a loop on the torch backend: flat apart from a creeping, slowing growth of 1-2 KB per fit over the first ~200 fits"

X = np.random.rand(2000, 20).astype("float32")
Y = np.random.rand(2000, 1).astype("float32")


def step():
    model = keras.Sequential(
        [keras.Input((20,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    model.fit(X, Y, epochs=1, batch_size=64, verbose=0)
    del model
    keras.backend.clear_session()
    gc.collect()
