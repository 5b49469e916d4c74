"""Keras on JAX in a fresh process (KERAS_BACKEND=jax set by the test): N fits of a new small
model, each inside trainguard.scope() (whose exit runs trainguard.frameworks.cleanup(): Keras'
clear_session, jax.clear_caches(), gc, malloc_trim); a jitted function's cache before and after
cleanup(); and one fit with trainguard.keras.MemoryCallback. Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys

import psutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import trainguard  # noqa: E402
import trainguard.keras  # noqa: E402
from trainguard import frameworks  # noqa: E402
from trainguard.workloads import keras_fit  # noqa: E402

PARAMS = {"units": 16, "rows": 128, "features": 20, "epochs": 1, "batch_size": 64, "clear_session": False}


def fits(n: int) -> list[int]:
    process = psutil.Process()
    rss = []
    for i in range(n):
        with trainguard.scope(census=False) as s:
            keras_fit({**PARAMS, "seed": i})
        rss.append(process.memory_info().rss)
    steps = dict(s.report.cleanup_steps_s)
    assert "jax_clear_caches" in steps and "keras_clear_session" in steps, steps
    return rss


def caches() -> dict:
    import jax
    import jax.numpy as jnp

    step = jax.jit(lambda x: x * 2 + 1)
    step(jnp.ones(3))
    before = step._cache_size()
    ran = frameworks.cleanup()
    return {"before": before, "after": step._cache_size(), "steps": sorted(ran)}


def callback() -> dict:
    import keras
    import numpy as np

    x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    memory = trainguard.keras.MemoryCallback(count_tensors=True)
    history = model.fit(x, x[:, :1], epochs=3, verbose=0, callbacks=[memory])
    return {
        "keys": sorted(k for k in history.history if k.startswith("memory_")),
        "tensors": history.history["memory_live_tensors"],
    }


if __name__ == "__main__":
    import keras

    rss = fits(int(sys.argv[1]))
    print(
        json.dumps(
            {"backend": keras.backend.backend(), "rss": rss, "caches": caches(), "callback": callback()}
        )
    )
