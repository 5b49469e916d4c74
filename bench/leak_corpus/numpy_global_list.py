"""Arrays appended to a module-level list for 'later analysis'."""

import numpy as np

EXPECTED = "leak"
SOURCE = "numpy: each step appends a 100 KB array to a global list"

RESULTS = []


def step():
    a = np.random.rand(200, 200)
    b = a @ a.T
    RESULTS.append(b[:, :64].copy())  # 100 KB kept per call
