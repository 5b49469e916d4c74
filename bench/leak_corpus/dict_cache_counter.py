"""A memo dict keyed by a counter that never repeats."""

import numpy as np

EXPECTED = "leak"
SOURCE = "unbounded dict cache keyed by a step counter (keys never repeat), ~40 KB per entry"

_cache = {}
_step = [0]


def features(i):
    if i not in _cache:
        _cache[i] = np.random.rand(5000)
    return _cache[i]


def step():
    _step[0] += 1
    features(_step[0]).sum()
