"""Trial functions for the Slurm backend's tests, loaded by the workers as 'slurm_trials.py:fn'."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path


def draw(params):
    """Deterministic for a seeded run: the same value on any backend, pilot or worker."""
    time.sleep(params.get("sleep_s", 0.0))
    return {"x": params["x"], "square": params["x"] ** 2, "draw": random.random()}


def job(params):
    """Which Slurm job (pilot) ran this trial, after ``sleep_s``; notes the start in ``folder``."""
    folder = params.get("folder")
    if folder:
        Path(folder, f"started-{params['x']}-{os.getpid()}").write_text(os.environ.get("SLURM_JOB_ID", ""))
    time.sleep(params.get("sleep_s", 0.0))
    return {"x": params["x"], "job": os.environ.get("SLURM_JOB_ID")}


def alloc(params):
    """Grow by 10 MiB every 20 ms (up to 2 GiB): a trial the memory limit must stop."""
    held = []
    for _ in range(200):
        held.append(bytearray(b"\x01") * (10 * 2**20))
        time.sleep(0.02)
    return {"held": len(held)}


def staged(params, ctx):
    """Stages of ``sleep_s`` each, checkpointed; the job ids of the pilots it ran in."""
    state = ctx.restore(default={"stage": 0, "jobs": []})
    for stage in range(state["stage"], params["stages"]):
        Path(params["folder"], f"stage-{stage}").write_text(os.environ.get("SLURM_JOB_ID", ""))
        time.sleep(params["sleep_s"])
        state = {"stage": stage + 1, "jobs": [*state["jobs"], os.environ.get("SLURM_JOB_ID")]}
        ctx.checkpoint(state)
    return state


def slurm_oom(params):
    """Play Slurm's cgroup OOM kill of this worker: slurmstepd's own line in the job's output (the
    worker's stderr is the pilot's), then SIGKILL, as the kernel's OOM killer in the job's cgroup."""
    import signal
    import sys

    print(
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=0.0. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.",
        file=sys.stderr,
        flush=True,
    )
    os.kill(os.getpid(), signal.SIGKILL)
