"""Trial functions for the memory-pressure tests (loaded by workers as a file ref): a training that
keeps ``keep_mib`` per epoch, reads ``ctx.under_pressure`` (or not) and checkpoints when it is set."""

from __future__ import annotations

import os
import time

import numpy as np

MiB = 2**20


def leaky_training(params, ctx):
    """``epochs`` epochs, each keeping ``keep_mib`` MiB (touched) and adding a seeded draw to
    ``total``; with ``listen`` it checkpoints when the supervisor raises pressure."""
    state = ctx.restore(default={"epoch": 0, "total": 0.0})
    kept = []
    pids = [os.getpid()]
    for epoch in range(state["epoch"], params["epochs"]):
        block = np.full(params.get("keep_mib", 40) * MiB // 8, float(epoch))  # written: resident
        kept.append(block)
        time.sleep(params.get("epoch_s", 0.3))
        draw = float(np.random.default_rng(epoch).random())
        state = {"epoch": epoch + 1, "total": state["total"] + draw}
        if params.get("listen", True) and ctx.under_pressure:
            if params.get("unpicklable_under_pressure"):
                ctx.checkpoint({**state, "bad": lambda: None})
            ctx.checkpoint(state)  # under pressure: this worker ends here, a fresh one resumes
        elif epoch + 1 in params.get("checkpoint_at", ()):
            ctx.checkpoint(state)  # a regular checkpoint, well before any pressure
    return {
        "total": round(state["total"], 12),
        "epochs": state["epoch"],
        "resumed": ctx.resumed,
        "pid": pids[0],
    }
