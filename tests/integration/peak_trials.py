"""Trials whose peak memory is a property of their params, for the peak model's tests."""

from __future__ import annotations

import time

import numpy as np

MiB = 2**20


def activations(params):
    """Holds width x batch x 32 KiB for a moment (as a layer's activations would), then returns."""
    size = int(params["width"]) * int(params["batch_size"]) * 32768
    block = np.ones(size // 8, dtype=np.float64)  # touched: resident, not just reserved
    time.sleep(params.get("hold_s", 0.15))
    return {"mib": size / MiB, "sum": float(block[:10].sum())}
