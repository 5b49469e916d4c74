"""Keras fit in a loop, seed-sized, on the tensorflow backend, with the fix: trainguard.frameworks.cleanup()
where the seed calls clear_session()."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

import trainguard  # noqa: E402

EXPECTED = "no_leak"
# expected by issue 29 (the README's fix stops the leak); measured on tensorflow-cpu 2.21 / keras
# 3.15 its RSS still grows +33 to +194 KiB a fit and bytes in use +3 to +9 KiB, above the default
# tolerance of a ~1 s fit, so the check says leak or inconclusive (BENCHMARKS.md, issue 29)
SOURCE = (
    "Keras 3 on TF: keras_tf_seed_fit_loop with trainguard.frameworks.cleanup() in place of "
    "clear_session + gc (the README's one-line fix): 0 Operations a fit, counts exactly flat"
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
