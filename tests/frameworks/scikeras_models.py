"""A scikeras model whose every fit leaks in the process that runs it (TF backend: traced graphs)."""

from __future__ import annotations

import os

import numpy as np

#: RSS (bytes) of the process at each model build, in the process that builds
BUILD_RSS: list[int] = []


def data(n: int = 1200, features: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features)).astype("float32")
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype("int64")
    return X, y


def build(hidden: int = 64) -> object:
    import keras
    import psutil

    BUILD_RSS.append(psutil.Process(os.getpid()).memory_info().rss)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def classifier() -> object:
    from scikeras.wrappers import KerasClassifier

    return KerasClassifier(model=build, epochs=1, batch_size=32, verbose=0, random_state=0)
