"""Trial functions for the Ray backend's tests, loaded by the workers as 'ray_trials.py:fn'."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path


def draw(params):
    """Deterministic for a seeded run: the same value on any backend, node or worker."""
    time.sleep(params.get("sleep_s", 0.0))
    return {"x": params["x"], "square": params["x"] ** 2, "draw": random.random()}


def where(params):
    """Hold the trial until every slot is busy, then say which process ran it."""
    time.sleep(params.get("sleep_s", 0.0))
    return {"x": params["x"], "pid": os.getpid()}


def hold(params):
    """Note this attempt's pid in ``folder``, then wait for ``folder/release`` (at most 60 s).

    A second attempt (after the first was killed) finds the release file and returns at once."""
    folder = Path(params["folder"])
    (folder / f"started-{params['x']}-{os.getpid()}").write_text(str(os.getpid()))
    if params.get("quick"):
        return {"x": params["x"], "pid": os.getpid()}
    deadline = time.monotonic() + 60.0
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"x": params["x"], "pid": os.getpid()}


def alloc(params):
    """Grow by 10 MiB every 20 ms (up to 2 GiB): a trial the memory limit must stop."""
    held = []
    for _ in range(200):
        held.append(bytearray(b"\x01") * (10 * 2**20))
        time.sleep(0.02)
    return {"held": len(held)}
