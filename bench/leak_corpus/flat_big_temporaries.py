"""Control (noisy): large temporaries of varying size, nothing kept."""

import numpy as np

EXPECTED = "no_leak"
SOURCE = "numpy step allocating 8-80 MB temporaries of random size, nothing kept (RSS swings)"

rng = np.random.default_rng(0)


def step():
    n = int(rng.integers(1_000_000, 10_000_000))
    a = rng.random(n)
    b = np.sort(a)[::7].copy()
    del a
    return float(b.sum())
