"""Keras fit in a loop, seed-sized, on the tensorflow backend, with the fix: trainguard.frameworks.cleanup()
where the seed calls clear_session()."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

import trainguard  # noqa: E402

# Measured on tensorflow-cpu 2.21 / keras 3.15: counts exactly flat (0 Operations a fit), bytes in
# use +3.5 KiB a fit for good (TensorFlow's tf.data metric cells and function stats publishers, a
# fixed cost per fit), RSS outside glibc's heaps flat; RSS as a whole +30-65 KiB a fit early,
# slowing toward the untrimmed level: pages malloc_trim(0) gave back, touched again and pinned
# (BENCHMARKS.md, "no_leak from exact evidence").

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
