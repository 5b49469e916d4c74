"""Reference workloads: the seed's repeated Keras ``fit`` (and a plain PyTorch loop), sized by arguments.

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

__all__ = ["keras_fit", "torch_fit", "DEMO_PARAMS"]

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


def torch_fit(params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A plain PyTorch training loop on the same data shape as :func:`keras_fit`."""
    import numpy as np
    import torch

    p = {**DEMO_PARAMS, "seed": 0, "learning_rate": 1e-3, **(params or {})}
    torch.manual_seed(int(p["seed"]))
    rng = np.random.default_rng(int(p["seed"]))
    x = torch.from_numpy(rng.standard_normal((int(p["rows"]), int(p["features"]))).astype("float32"))
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    units = int(p["units"])
    model = torch.nn.Sequential(
        torch.nn.Linear(int(p["features"]), units),
        torch.nn.ReLU(),
        torch.nn.Linear(units, units),
        torch.nn.ReLU(),
        torch.nn.Linear(units, 1),
    )
    opt = torch.optim.Adam(model.parameters(), lr=float(p["learning_rate"]))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    bs = int(p["batch_size"])
    last = 0.0
    for _ in range(int(p["epochs"])):
        for i in range(0, x.shape[0], bs):
            opt.zero_grad()
            loss = loss_fn(model(x[i : i + bs]), y[i : i + bs])
            loss.backward()
            opt.step()
            last = loss.item()
    return {"loss": last, "backend": "torch"}
