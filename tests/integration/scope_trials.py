"""A trial whose peak memory depends on a param the peak model cannot use (a dtype name), for the
tests of which runs' history the model is fitted on."""

from __future__ import annotations

import time

import numpy as np

#: elements per row: one MiB of float64, a quarter MiB of float16
ROW = 131072


def rows(params):
    """Holds ``rows`` x 128 Ki elements of ``dtype`` for a moment (touched: resident), then returns."""
    block = np.ones(int(params["rows"]) * ROW, dtype=params["dtype"])
    time.sleep(0.15)  # the sampler sees the peak
    return {"bytes": int(block.nbytes)}


def rows_or_fail(params):
    """:func:`rows`, or a ValueError for a params with ``fail`` (to stop a run part way)."""
    if params.get("fail"):
        raise ValueError("stopped here on purpose")
    return rows(params)
