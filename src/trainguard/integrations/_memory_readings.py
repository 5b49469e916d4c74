"""What every ``MemoryCallback`` reads: the process tree's RSS, the GPU memory the loaded
frameworks' allocators hold, and a live-tensor count kept within a time budget.

No framework is imported here: the GPU figure comes from the allocators of frameworks already
loaded (:func:`trainguard.frameworks.gpu_allocated_bytes`), the count from the census.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from trainguard.exceptions import ConfigError

__all__ = ["TensorCounter", "gpu_bytes", "live_tensors", "tree_rss"]

#: what a census is taken to cost before the first one (measured 0.1-0.5 s with a framework loaded;
#: estimating it from len(gc.get_objects()) costs as much as a census)
FIRST_CENSUS_S = 0.5
#: the share of the training time the census may take under ``count_tensors="auto"``
CENSUS_SHARE = 0.05


def tree_rss() -> int:
    """The RSS of this process's tree, in bytes.

    Returns:
        The bytes.
    """
    from trainguard.process import tree_memory

    return int(tree_memory(os.getpid()).rss_bytes)


def gpu_bytes() -> int | None:
    """What the loaded frameworks' allocators hold on GPUs, or None where none reports a GPU.

    Returns:
        The bytes, or None.
    """
    from trainguard.frameworks import gpu_allocated_bytes

    return gpu_allocated_bytes()


def live_tensors() -> int:
    """Live framework tensors and variables (a census without numpy arrays).

    Returns:
        The count.
    """
    from trainguard.probes.census import census

    result = census(numpy=False, graph_objects=False, stack_locals=False)
    # a Keras variable wraps a backend tensor that is counted under its framework already
    return sum(e.count for e in result.entries if e.framework != "keras")


class TensorCounter:
    """When to take the live-tensor census: ``True`` every epoch, ``False`` never, ``"auto"``
    while the census time stays within 5 % of the training time seen so far (across fits).

    Under ``"auto"`` a census runs when the budget covers its expected cost (the last census's,
    or 0.5 s before the first); in between the last count is repeated, and before the first
    there is none.

    Args:
        mode: ``True``, ``False`` or ``"auto"``.

    Raises:
        ConfigError: another value.
    """

    def __init__(self, mode: bool | str) -> None:
        if mode not in (True, False, "auto"):
            raise ConfigError(f"count_tensors={mode!r} must be True, False or 'auto'")
        self.mode = mode
        self._census_s: float | None = None
        self._spent_s = 0.0
        self._train_s = 0.0
        self._count: int | None = None

    def count(self, trained_s: float, take: Callable[[], int]) -> int | None:
        """The count for the epoch that just ended.

        Args:
            trained_s: the epoch's training time, in seconds.
            take: the census to take (returns the count).

        Returns:
            The count, the last one repeated, or None (never, or no budget yet).
        """
        if not self.mode:
            return None
        self._train_s += trained_s
        if self.mode == "auto":
            expected = FIRST_CENSUS_S if self._census_s is None else self._census_s
            if self._spent_s + expected > CENSUS_SHARE * self._train_s:
                return self._count
        start = time.perf_counter()
        self._count = take()
        self._census_s = time.perf_counter() - start
        self._spent_s += self._census_s
        return self._count
