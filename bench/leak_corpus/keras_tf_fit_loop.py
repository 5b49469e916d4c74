"""Keras 3 on TensorFlow: build and fit a fresh model in a loop (cross-validation style)."""

import gc
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = "leak"
SOURCE = (
    "Keras fit in a loop on the TF backend grows every iteration despite clear_session() and gc.collect()"
)

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
