"""model(x) called eagerly in a loop on TF (inference without predict)."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = "no_leak"
SOURCE = "Keras 3 TF backend: model(x, training=False) called eagerly in a loop"

model = keras.Sequential(
    [keras.Input((20,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(1)]
)
X = np.random.rand(256, 20).astype("float32")


def step():
    model(X, training=False).numpy()
