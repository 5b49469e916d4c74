"""The seed's Keras fit loop on the tensorflow backend with the fix: trainguard.frameworks.cleanup()
where the seed calls clear_session()."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

import trainguard  # noqa: E402

EXPECTED = "no_leak"
SOURCE = (
    "Keras 3 on TF: the seed repro scaled to ~1 s a fit, with trainguard.frameworks.cleanup(); what "
    "stays of a fit is ~3.5 KiB of TF's native bookkeeping (a fifth of the tolerance), while RSS "
    "creeps back toward its untrimmed level inside glibc's heaps (bench/seed_heaps_probe.py)"
)

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
    trainguard.frameworks.cleanup()
