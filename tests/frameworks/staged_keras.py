"""A Keras training on the TensorFlow backend that leaks per epoch, written as a staged trial: each
epoch traces a new ``tf.function`` that is kept (with a large constant in its graph), as code that
builds a function inside its training loop does. Loaded by workers as a file reference; also run by
bench/staged_bench.py with more epochs."""

from __future__ import annotations

import os

import numpy as np

_KEPT: list = []  # the leak: every epoch's traced function stays alive


def _traced_probe(tf, model, big):
    """A new tf.function whose graph embeds ``big`` as a constant."""

    @tf.function
    def probe(t):
        return model(t) + tf.reduce_sum(tf.constant(big)) * 0.0

    return probe


def train(params, ctx):
    import keras
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(0)
    x = rng.random((512, 32), dtype=np.float32)
    y = (x @ rng.random((32, 1), dtype=np.float32)).astype(np.float32)
    keras.utils.set_random_seed(1234)  # the same initial weights in every worker
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    state = ctx.restore(default={"epoch": 0, "losses": []})
    if ctx.resumed:
        model.load_weights(os.path.join(ctx.restore_path, "model.weights.h5"))
    leak_values = params.get("leak_mib", 8) * (1 << 20) // 4
    for epoch in range(state["epoch"], params["epochs"]):
        # reseeded per epoch: a resumed worker shuffles exactly as an unstaged one would
        keras.utils.set_random_seed(1000 + epoch)
        probe = _traced_probe(tf, model, np.full((leak_values,), float(epoch), dtype=np.float32))
        probe(x[:4])
        _KEPT.append(probe)
        history = model.fit(x, y, epochs=1, batch_size=32, shuffle=True, verbose=0)
        state = {"epoch": epoch + 1, "losses": state["losses"] + [float(history.history["loss"][0])]}
        model.save_weights(os.path.join(ctx.checkpoint_path, "model.weights.h5"))
        ctx.checkpoint(state)
    return {
        "losses": state["losses"],
        "weights": [w.flatten().tolist()[:16] for w in model.get_weights()],
        "pid": os.getpid(),
    }
