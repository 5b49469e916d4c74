"""Trial functions for the seed, shared-data and staged-trial tests (loaded by workers as a file ref)."""

from __future__ import annotations

import os
import random

import numpy as np


def draws(params):
    """What a trial draws from Python's random and numpy, with the worker it ran in."""
    return {"random": random.random(), "numpy": float(np.random.rand()), "pid": os.getpid()}
