"""Keras fit in a loop, seed-sized, on the tensorflow backend, with the fix: trainguard.frameworks.cleanup()
where the seed calls clear_session()."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

import trainguard  # noqa: E402

# Not a leak-corpus case: whether this slow growth levels off is not known. Measured on
# tensorflow-cpu 2.21 / keras 3.15, RSS grows +194 KiB a fit early, +33-45 KiB after 40 fits, and
# bytes in use +9 to +3 KiB a fit, above the default tolerance of a ~1 s fit (BENCHMARKS.md,
# "no_leak from exact evidence"); the counts are exactly flat (0 Operations a fit).

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
