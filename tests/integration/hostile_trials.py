"""Trial functions for the issue-23 tests (loaded by workers as a file ref)."""

from __future__ import annotations

import os
import subprocess
import sys


def oom_scores(params):
    """This worker's oom_score_adj and that of a process the trial starts."""
    child = subprocess.run(["cat", "/proc/self/oom_score_adj"], capture_output=True, text=True, check=True)
    with open("/proc/self/oom_score_adj") as fh:
        return {"worker": int(fh.read()), "child": int(child.stdout), "pid": os.getpid(), "py": sys.version}


def generator_draws(params):
    """What numpy's recommended generator gives, unseeded and seeded by the trial itself."""
    import numpy as np

    return {
        "first": float(np.random.default_rng().random()),
        "second": float(np.random.default_rng().random()),
        "explicit": float(np.random.default_rng(7).random()),
    }


def wait_for_file(params):
    """Returns at once, or (given 'wait_for') once that file exists (at most 60 s)."""
    import time

    deadline = time.monotonic() + 60
    while params.get("wait_for") and not os.path.exists(params["wait_for"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return params.get("x")
