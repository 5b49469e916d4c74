"""Control (plateau): a pool that grows for ~70 steps in shrinking increments, then stops."""

import numpy as np

EXPECTED = "no_leak"
SOURCE = "allocator/kernel-cache style warm-up: pool grows over ~70 steps (slowing), then flat"

POOL = []
_i = [0]


def step():
    _i[0] += 1
    if _i[0] <= 70:
        kb = int(2048 * (1 - _i[0] / 71)) + 64
        POOL.append(np.ones(kb * 128))  # kb KiB
    x = np.random.rand(300, 300)
    return float((x @ x).sum())
