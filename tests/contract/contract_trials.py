"""Tiny trial functions for the backend contract (no framework): loaded by the workers of every
backend as ``contract_trials.py:fn``, on this machine or on a Ray node or in a Slurm pilot."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path


def echo(params):
    """The params back, a seeded draw and the worker's pid."""
    return {"x": params["x"], "square": params["x"] ** 2, "draw": random.random(), "pid": os.getpid()}


def boom(params):
    """Raise with a message the result must carry."""
    raise ValueError(f"boom {params['x']} from the trial")


def exit_hard(params):
    """End the worker mid-trial without a word (no exception, no result)."""
    os._exit(7)


def alloc(params):
    """Grow by 10 MiB every 20 ms (up to 2 GiB): a trial the memory limit must stop."""
    held = []
    for _ in range(200):
        held.append(bytearray(b"\x01") * (10 * 2**20))
        time.sleep(0.02)
    return {"held": len(held)}


def fill_shm(params):
    """Write ``mb`` MiB into ``path`` (in /dev/shm) in 8 MiB pieces and close it: memory no RSS shows."""
    chunk = b"\1" * (8 << 20)
    with open(params["path"], "wb") as fh:
        for _ in range(params["mb"] // 8):
            fh.write(chunk)
            time.sleep(0.01)
    time.sleep(30.0)  # held until the memory limit kills it
    return os.path.getsize(params["path"])


def hold(params):
    """Note this attempt's pid in ``folder``, then wait for ``folder/release`` (at most 60 s)."""
    folder = Path(params["folder"])
    (folder / f"started-{params['x']}-{os.getpid()}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60.0
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"x": params["x"], "pid": os.getpid()}


def fault(params):
    """The trial named by ``kind`` (``echo0`` ... ``echo3`` are :func:`echo`)."""
    kind = params["kind"]
    return (echo if kind.startswith("echo") else globals()[kind])(params)
