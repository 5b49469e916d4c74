"""Keras 3 on TensorFlow imported inside the step, as a train() function or a library helper does:
the first call builds all of TensorFlow and Keras (about 400,000 objects) after the check froze its
baseline, and every later fit leaves its graph behind."""

import gc
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

EXPECTED = "leak"
SOURCE = "the Keras TF fit leak with keras imported on the first call (trainguard.workloads.keras_fit does)"


def step():
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((1000, 20), dtype=np.float32)
    y = rng.random((1000, 1), dtype=np.float32)
    model = keras.Sequential(
        [keras.Input((20,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    del model
    keras.backend.clear_session()
    gc.collect()
