"""Reference workloads: the seed's repeated Keras ``fit`` and a numpy fit whose peak grows with its
batch, sized by arguments.

They are what the demo, the benchmarks and the framework tests run, so every figure in the project
comes from the same code. Each function imports its framework when called, never at import time.

The seed repro (Keras 3 on the TF backend grows about 56 MB per iteration even after
``clear_session()`` and ``gc.collect()``) is::

    Dense(2000) -> Dense(2000) -> Dense(1) on 5000 x 100, 1 epoch, batch 32

``keras_fit`` defaults are that repro scaled to about 1 s a fit on 2 cores; pass ``units=2000,
rows=5000, features=100`` for the original.
"""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["keras_fit", "numpy_fit", "DEMO_PARAMS"]

#: Defaults of the demo and benchmarks: the seed's model, scaled down.
DEMO_PARAMS: dict[str, Any] = {"units": 512, "rows": 2000, "features": 100, "epochs": 1, "batch_size": 32}


def keras_fit(params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the seed's model, ``fit`` it once, clean up as the seed does, and return the metrics.

    ``params`` keys (all optional): ``units``, ``rows``, ``features``, ``epochs``, ``batch_size``,
    ``seed``, ``learning_rate``, ``clear_session`` (default True: the cleanup the seed does by hand).
    Uses whatever Keras backend ``KERAS_BACKEND`` selects.
    """
    import numpy as np

    p = {**DEMO_PARAMS, "seed": 0, "learning_rate": 1e-3, "clear_session": True, **(params or {})}
    import keras

    rng = np.random.default_rng(int(p["seed"]))
    x = rng.standard_normal((int(p["rows"]), int(p["features"]))).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    # the weights' initialisation and fit's shuffling too: the same params give the same loss
    keras.utils.set_random_seed(int(p["seed"]))
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(int(p["features"]),)),
            keras.layers.Dense(int(p["units"]), activation="relu"),
            keras.layers.Dense(int(p["units"]), activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=float(p["learning_rate"])),
        loss="binary_crossentropy",
        metrics=["accuracy"],
    )
    history = model.fit(x, y, epochs=int(p["epochs"]), batch_size=int(p["batch_size"]), verbose=0)
    result = {
        "loss": float(history.history["loss"][-1]),
        "accuracy": float(history.history["accuracy"][-1]),
        "backend": keras.backend.backend(),
    }
    del model, history
    if p["clear_session"]:
        keras.backend.clear_session()
        gc.collect()
    return result


def numpy_fit(params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A small numpy network trained with gradient accumulation, whose peak memory grows with
    ``batch_size``: the activations of every layer are kept for the backward pass, as a framework
    does, so a step holds about ``batch_size x width x (layers + 2) x 4`` bytes.

    ``params`` keys (all optional): ``batch_size`` (64), ``grad_accum`` (1: micro-batches summed
    per update), ``steps`` (2 updates; 1 when :func:`trainguard.probing` says a batch-size probe
    runs), ``width`` (2048), ``layers`` (6), ``features`` (16), ``seed``, ``learning_rate``.
    The network is ``x @ W`` then ``layers`` element-wise ``tanh(h * w + b)``, with a squared loss.
    Returns the loss and the sizes it ran with (``effective_batch`` = batch_size x grad_accum).
    """
    import numpy as np

    from trainguard.fitting import probing

    p = {
        "batch_size": 64,
        "grad_accum": 1,
        "steps": 2,
        "width": 2048,
        "layers": 6,
        "features": 16,
        "seed": 0,
        "learning_rate": 1e-2,
        **(params or {}),
    }
    bs, accum, width = int(p["batch_size"]), int(p["grad_accum"]), int(p["width"])
    steps = 1 if probing() else int(p["steps"])
    rng = np.random.default_rng(int(p["seed"]))
    w_in = (rng.standard_normal((int(p["features"]), width)) / 4).astype("float32")
    ws = [np.ones(width, dtype="float32") for _ in range(int(p["layers"]))]
    bs_ = [np.zeros(width, dtype="float32") for _ in range(int(p["layers"]))]
    lr = float(p["learning_rate"])
    loss = 0.0
    for _ in range(steps):
        grads_w = [np.zeros_like(w) for w in ws]
        grads_b = [np.zeros_like(b) for b in bs_]
        loss = 0.0
        for _ in range(accum):
            x = rng.standard_normal((bs, int(p["features"])), dtype="float32")
            target = np.tanh(x.sum(axis=1, keepdims=True))
            acts = [x @ w_in]
            for w, b in zip(ws, bs_, strict=True):
                acts.append(np.tanh(acts[-1] * w + b))
            err = acts[-1].mean(axis=1, keepdims=True) - target
            loss += float((err**2).mean()) / accum
            grad = np.broadcast_to(2 * err / (bs * width * accum), acts[-1].shape).astype("float32")
            for k in range(len(ws) - 1, -1, -1):
                grad = grad * (1 - acts[k + 1] ** 2)  # through tanh
                grads_w[k] += (grad * acts[k]).sum(axis=0)
                grads_b[k] += grad.sum(axis=0)
                grad = grad * ws[k]
            del acts, grad
        for k in range(len(ws)):
            ws[k] -= lr * grads_w[k]
            bs_[k] -= lr * grads_b[k]
    return {
        "loss": loss,
        "batch_size": bs,
        "grad_accum": accum,
        "effective_batch": bs * accum,
        "steps": steps,
        "probe": probing(),
    }
