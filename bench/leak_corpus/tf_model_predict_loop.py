"""model.predict called in a loop on the same Keras model (TF backend)."""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = "leak"
SOURCE = "Keras 3 TF backend: model.predict on the same model in a loop; measured here: steady ~2 KB per call over 950 calls (~1.3 MB/min), borderline"


def setup():
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(1)])
    return model, np.random.rand(512, 20).astype("float32")


def step(state):
    model, x = state
    model.predict(x, verbose=0)
