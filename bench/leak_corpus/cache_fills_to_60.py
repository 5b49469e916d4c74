"""Control (plateau): a cache of 60 slots that fills during the first 60 steps, then is reused."""

import time

import numpy as np

EXPECTED = "no_leak"
SOURCE = "bounded cache: one 1 MB entry per step until 60 entries, then hits only (plateau after ~60 steps)"

_cache = {}
_i = [0]


def step():
    time.sleep(0.03)  # the training work around the cache
    _i[0] += 1
    key = _i[0] % 60
    if key not in _cache:
        _cache[key] = np.ones(131072)  # 1 MB
    _cache[key].sum()
