"""Hypermodels for the KerasTuner tests (imported by name in trainguard workers)."""

from __future__ import annotations

import os
import time

import numpy as np

#: RSS (bytes) of the process at each model build, in the process that builds
BUILD_RSS: list[int] = []


def data(n: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 16)).astype("float32")
    y = (x[:, 0] - x[:, 1] + 0.3 * x[:, 2] > 0).astype("float32")
    return x, y


def build(hp: object) -> object:
    import keras
    import psutil

    BUILD_RSS.append(psutil.Process(os.getpid()).memory_info().rss)
    keras.utils.set_random_seed(0)  # each trial trains the same way in any process
    units = hp.Int("units", 2, 64, step=2)
    rate = hp.Float("learning_rate", 1e-4, 3e-1, sampling="log")
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(rate), loss="binary_crossentropy")
    return model


def build_hoarding(hp: object) -> object:
    """A model whose build first holds ``hoard_mb`` MiB (a trial to be killed for memory); the
    space is that one choice, so two random trials try both values."""
    import keras

    hoard = hp.Choice("hoard_mb", [0, 1500])
    if hoard:
        block = np.ones(hoard * (1 << 20) // 8)
        time.sleep(10.0)
        del block
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model
