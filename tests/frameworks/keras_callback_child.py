"""Runs fit() with trainguard.keras.MemoryCallback under the Keras backend named in KERAS_BACKEND;
prints one JSON line per case. Used by test_keras_callback.py in a fresh process (a Keras backend
is chosen once per process)."""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import trainguard.keras  # noqa: E402
from trainguard.process import tree_memory  # noqa: E402

MiB = 2**20


class Batches(keras.utils.PyDataset):
    """Training batches with a per-epoch augmentation; ``leak_mib`` > 0 keeps every augmented copy
    (the bug: a cache that is never cleared), about that many MiB per epoch."""

    def __init__(self, leak_mib: int) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(256, 16)).astype("float32")
        self.y = rng.normal(size=(256, 1)).astype("float32")
        self.leak_mib = leak_mib
        self.kept: list[np.ndarray] = []

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        sl = slice(index * 32, (index + 1) * 32)
        if self.leak_mib:
            self.kept.append(np.ones(self.leak_mib * MiB // 8 // 8, dtype="float64"))  # per batch
        return self.x[sl], self.y[sl]


def run(case: str, leak_mib: int, epochs: int, action: str, margin_mib: int) -> dict:
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    data = Batches(leak_mib)
    model.fit(data, epochs=1, verbose=0)  # warm-up: first traces and allocator pools
    limit = tree_memory().rss_bytes + margin_mib * MiB
    callback = trainguard.keras.MemoryCallback(
        limit=limit, action=action, every_n_batches=4, count_tensors=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(data, epochs=epochs, verbose=0, callbacks=[callback])
    return {
        "case": case,
        "backend": keras.backend.backend(),
        "limit": limit,
        "epochs_run": len(history.history["loss"]),
        "history_keys": sorted(k for k in history.history if k.startswith("memory_")),
        "rss": history.history["memory_rss_bytes"],
        "peak": history.history["memory_peak_rss_bytes"],
        "tensors": history.history.get("memory_live_tensors", []),
        "growth": history.history.get("memory_growth_bytes_per_epoch", []),
        "stopped_epoch": callback.stopped_epoch,
        "events": [list(e) for e in callback.events],
        "warnings": [str(w.message) for w in caught if "MemoryCallback" in str(w.message)],
    }


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        case, leak, epochs, action, margin = spec.split(":")
        print(json.dumps(run(case, int(leak), int(epochs), action, int(margin))), flush=True)
