"""Keras fit in a loop, seed-sized, on the tensorflow backend (the cleanup users try: del, clear_session, gc)."""

import gc
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = "leak"
SOURCE = "Keras 3 on TF: the seed repro scaled to ~1 s a fit (Dense 512x2, 2000x100, batch 32) rebuilt and fit in a loop, clear_session + gc each time"

rng = np.random.default_rng(0)
X = rng.standard_normal((2000, 100)).astype("float32")
Y = (X.sum(axis=1) > 0).astype("float32")


def step():
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(100,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(X, Y, epochs=1, batch_size=32, verbose=0)
    del model
    keras.backend.clear_session()
    gc.collect()
