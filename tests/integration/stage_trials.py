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


_HELD: list[bytearray] = []


def staged(params, ctx):
    """A long trial in stages that leaks ``leak_mib`` per stage; sums the stage numbers it ran."""
    import time
    from pathlib import Path

    state = ctx.restore(default={"stage": 0, "total": 0, "pids": []})
    if ctx.resumed and params.get("check_file"):
        assert Path(ctx.restore_path, "weights.bin").read_bytes() == bytes([state["stage"]]) * 1000
    for stage in range(state["stage"], params["stages"]):
        _HELD.append(bytearray(params.get("leak_mib", 0) << 20))
        for chunk in _HELD[-1:]:
            chunk[::4096] = b"x" * len(chunk[::4096])  # touch the pages: resident
        time.sleep(params.get("sleep_s", 0.0))
        state = {"stage": stage + 1, "total": state["total"] + stage, "pids": state["pids"] + [os.getpid()]}
        Path(ctx.checkpoint_path, "weights.bin").write_bytes(bytes([stage + 1]) * 1000)
        ctx.checkpoint(state, remaining=params["stages"] - stage - 1 if params.get("hint") else None)
    return {"total": state["total"], "workers": len(set(state["pids"])), "restart": ctx.restart_reason}


def bad_checkpoint(params, ctx):
    if params["kind"] == "unpicklable":
        ctx.checkpoint({"gen": (i for i in range(3))})
    if params["kind"] == "restore":
        ctx.restore()
    return None


def shared_shapes(params, ctx):
    """The shapes of the shared arrays as a worker reads them."""
    return {name: list(ctx.data[name].shape) for name in ("s", "f")}


def kept_path(params, ctx):
    """Keeps ``ctx.checkpoint_path`` in a variable once, as users do, and saves through it each stage."""
    from pathlib import Path

    folder = Path(ctx.checkpoint_path)
    for stage in range(ctx.stage, params["stages"]):
        (folder / "model.bin").write_bytes(bytes([stage + 1]) * 100)
        ctx.checkpoint({"stage": stage + 1})
    return ctx.stage
