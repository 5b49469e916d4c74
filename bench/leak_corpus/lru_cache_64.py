"""Control (plateau): functools.lru_cache(maxsize=64) over distinct inputs with big results."""

import functools
import time

import numpy as np

EXPECTED = "no_leak"
SOURCE = "functools.lru_cache(maxsize=64) of 512 KB results over ever-new arguments: fills to 64, then evicts"

_i = [0]


@functools.lru_cache(maxsize=64)
def embed(i):
    return np.full(65536, float(i))  # 512 KB


def step():
    time.sleep(0.03)  # the training work around the cache
    _i[0] += 1
    embed(_i[0]).mean()
