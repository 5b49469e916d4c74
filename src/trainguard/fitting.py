"""Fitting a training into memory: the batch-size search (:func:`find_batch_size`) and the flag a
trial function reads to know it is being probed (:func:`probing`).

Every probe runs in a fresh worker under the hard limit, so a probe that runs out of memory poisons
nothing: the next probe starts in a clean process (retrying in the process that just failed is what
makes in-process finders report sizes that later fail, or fail at sizes that fit).
"""

from __future__ import annotations

import os

__all__ = ["probing", "PROBE_ENV"]

#: Set to "1" in the workers of a batch-size probe.
PROBE_ENV = "TRAINGUARD_PROBE"


def probing() -> bool:
    """True inside a trial that :func:`find_batch_size` runs as a probe: run a few steps only."""
    return os.environ.get(PROBE_ENV) == "1"
