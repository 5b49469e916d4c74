"""A slow step (about 1 s) that keeps a little each time."""

import time

import numpy as np

EXPECTED = "leak"
SOURCE = "slow training step (~1 s) that appends a 256 KB metrics array to a global log"

LOG = []


def step():
    t = time.perf_counter()
    a = np.random.rand(1000, 1000)
    while time.perf_counter() - t < 0.9:
        a = np.tanh(a * 0.5)
    LOG.append(a[:32].copy())  # 256 KB per step
