"""Trials for the same-start tests: draw from every generator, train a little with torch and with
Keras on the TensorFlow backend, and return what they drew and learned (loaded as a file ref)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np


def _torch_part() -> list[float]:
    import torch

    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [float(v) for v in model.weight.detach().flatten()[:6]]


def _keras_part() -> dict[str, list[float]]:
    import keras
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    x = np.random.rand(64, 6).astype("float32")
    y = np.random.rand(64, 1).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(x, y, epochs=2, batch_size=16, shuffle=True, verbose=0)
    return {
        "weights": [float(v) for v in model.layers[0].get_weights()[0].flatten()[:6]],
        "loss": [float(v) for v in history.history["loss"]],
        "tf_draw": [float(v) for v in tf.random.uniform((2,)).numpy()],
    }


def draw(params):
    out = {
        "random": random.random(),
        "numpy": float(np.random.rand()),
        "torch": _torch_part(),
        "keras": _keras_part(),
    }
    crash_file = params.get("crash_once_file")
    if crash_file and not Path(crash_file).exists():
        import json

        # what this first attempt drew, in its fresh worker; then it crashes, and the retry (in
        # another fresh worker) must draw the same
        Path(crash_file).write_text(json.dumps(out))
        os._exit(9)
    return out
