"""Trial functions for the bad-input catalogue (loaded by workers as 'catalogue_trials.py:fn')."""

from __future__ import annotations

import ctypes
import os
import sys
import time


def echo(params):
    return {"x": params.get("x")}


def raise_escape(params):
    raise ValueError("\x1b[2J\x1b]0;owned\x07 cleared your screen")


def return_escape(params):
    return {"text": "\x1b[31mred\x1b[0m"}


def nan(params):
    return {"loss": float("nan"), "best": float("inf")}


def not_json(params):
    return {"value": object()}


def big(params):
    return "x" * params.get("n", 100_000)


def exits(params):
    sys.exit(3)


def segfault(params):
    ctypes.string_at(0)


def sleeps(params):
    time.sleep(params.get("s", 30))
    return "woke"


def fails_then_ok(params):
    if params.get("x") == 1:
        raise RuntimeError("trial 1 fails")
    return params.get("x")


def write_garbage(params):
    """Write garbage onto the worker's message channel (its write end is argv[2])."""
    os.write(int(sys.argv[2]), b"\x00\x00\x00\x10this is garbage!")
    return "wrote"


def memory_error(params):
    raise MemoryError("out of memory in the trial")


def prints(params):
    """Print while it works, as training loops do (a closed output pipe must not fail it)."""
    time.sleep(0.2)
    print("training step", params.get("x"), flush=True)
    return params.get("x")


def step_exits():
    """A leak-check step that calls sys.exit (as a script's step might)."""
    sys.exit(4)


def step_interrupts():
    """A leak-check step that raises KeyboardInterrupt itself."""
    raise KeyboardInterrupt


def big_checkpoint(params, ctx):
    """A staged trial whose second checkpoint is bigger than what its disk has left."""
    import numpy as np

    for stage in range(ctx.stage, 2):
        size = params.get("mb", 8) if stage == 1 else 0.25
        np.save(os.path.join(ctx.checkpoint_path, "w.npy"), np.ones(int(size * (1 << 20)) // 8))
        ctx.checkpoint({"stage": stage})
    return {"resumed": ctx.resumed}


def fills_disk(params):
    """Trial 1 fills the disk its params name (as another program might) unless the filler file
    is there already (space freed by emptying it), then returns a result."""
    if params.get("x") == 1:
        try:
            fd = os.open(params["filler"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return {"x": 1, "text": "y" * 20_000}
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)
    return {"x": params.get("x"), "text": "y" * 20_000}
