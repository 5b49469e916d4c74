"""Trial functions for the seed, shared-data and staged-trial tests (loaded by workers as a file ref)."""

from __future__ import annotations

import os
import random

import numpy as np


def draws(params):
    """What a trial draws from Python's random and numpy, with the worker it ran in."""
    return {"random": random.random(), "numpy": float(np.random.rand()), "pid": os.getpid()}


def read_shared(params, ctx):
    """Touch every page of the shared arrays; say how they arrived."""
    data = ctx.data
    x = data["x"]
    total = float(x.sum(dtype=np.float64)) if params.get("touch", True) else None
    if params.get("copy"):
        private = np.array(x)  # a private copy: charged to this worker
        total = float(private.sum(dtype=np.float64))
    return {
        "sum": total,
        "memmap": isinstance(x, np.memmap),
        "writable": bool(x.flags.writeable),
        "path": data.path,
        "attach_s": data.attach_s,
        "pid": os.getpid(),
        "sleep": __import__("time").sleep(params.get("sleep_s", 0)),
    }
