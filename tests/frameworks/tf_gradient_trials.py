"""Trials for test_tf_custom_gradients: a small seeded Keras fit on TensorFlow that reports the
traced-graph objects left alive and this worker's RSS after it."""

from __future__ import annotations

import gc


def fit(params):
    import keras

    from trainguard.workloads import keras_fit

    keras.utils.set_random_seed(0)
    result = keras_fit({"units": 128, "rows": 512, "features": 20, "batch_size": 64, **params})
    gc.collect()
    ops = sum(1 for o in gc.get_objects() if type(o).__name__ == "Operation")
    with open("/proc/self/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {"loss": result["loss"], "operations": ops, "rss_bytes": rss_kb * 1024}
