"""A killed batch of several joblib tasks, rerun one task a trial: only the task over the limit fails.

joblib's auto-batching puts several small tasks in one batch, and a batch is one guarded trial. When
that trial is killed (memory limit, timeout, crash), which task did it is unknown, so each task of
the batch is run again alone, in a trial of its own, and the batch's result is put together from
theirs: the tasks that fit come back as if they had run alone, and only the one over the limit
fails (``error_score`` for a scikit-learn fit, else its error raised). A task that raised its own
exception raises it, as in any batch. The reruns are queued from the pool's driver thread, never
waited for there: :class:`SplitFuture` settles when the last one is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from trainguard.exceptions import TrainguardError

__all__ = ["OneTask", "SplitFuture", "outcome"]

logger = logging.getLogger(__name__)

Items = list[tuple[Any, tuple[Any, ...], dict[str, Any]]]


class OneTask:
    """Task ``index`` of a joblib batch (a ``BatchedCalls``), run alone with the batch's settings."""

    def __init__(self, batch: Any, index: int) -> None:
        self.batch = batch
        self.index = index

    def __call__(self) -> Any:
        self.batch.items = [self.batch.items[self.index]]
        return self.batch()


def outcome(future: Any, items: Items, failed_fits: Callable[[Items, BaseException], Any]) -> Any:
    """What joblib gets for ``future``: its result; for a killed trial of scikit-learn fits, each
    fit failed as scikit-learn expects (``failed_fits``); else the error raised.

    Args:
        future: a :class:`~trainguard.integrations._tasks.TaskFuture` that is done.
        items: the joblib tasks it ran.
        failed_fits: ``failed_fits(items, error)``: the fits' failed results, or None when the
            items are not scikit-learn fits.

    Returns:
        The list of the tasks' results.

    Raises:
        TrainguardError: the trial was killed and the tasks are not scikit-learn fits.
    """
    try:
        return future.result()
    except TrainguardError as err:
        if future.failure is None:
            raise
        logger.warning("%s", err)
        rebuilt = failed_fits(items, err)
        if rebuilt is None:
            raise
        return rebuilt


class SplitFuture:
    """The future joblib holds for one batch: the batch's own, or, once the batch's trial was
    killed with several tasks in it, the reruns of its tasks one a trial.

    Args:
        batch_future: the batch's :class:`~trainguard.integrations._tasks.TaskFuture`.
        items: the batch's tasks.
        rerun: ``rerun(index) -> TaskFuture`` queues task ``index`` alone (raises when the pool
            is closed: then the batch's own failure stands).
    """

    def __init__(self, batch_future: Any, items: Items, rerun: Callable[[int], Any]) -> None:
        self.items = items
        self._batch = batch_future
        self._rerun = rerun
        self._parts: list[Any] | None = None
        self._left = 0
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[SplitFuture], Any]] = []
        self._settled = threading.Event()
        batch_future.add_done_callback(self._batch_done)

    def _batch_done(self, batch: Any) -> None:
        if batch.failure is None or len(self.items) < 2:
            self._settle()
            return
        try:
            parts = [self._rerun(i) for i in range(len(self.items))]
        except Exception:  # noqa: BLE001 - the pool closed meanwhile: the batch's failure stands
            self._settle()
            return
        with self._lock:
            self._parts, self._left = parts, len(parts)
        for part in parts:
            part.add_done_callback(self._part_done)

    def _part_done(self, _: Any) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._settle()

    def _settle(self) -> None:
        with self._lock:
            self._settled.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def done(self) -> bool:
        """Whether the batch's result (or its reruns') is in."""
        return self._settled.is_set()

    def add_done_callback(self, fn: Callable[[SplitFuture], Any]) -> None:
        """Call ``fn(self)`` once settled (at once when it is already)."""
        with self._lock:
            if not self._settled.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def result(self, failed_fits: Callable[[Items, BaseException], Any], timeout: float | None = None) -> Any:
        """The batch's results, from the batch's trial or from its tasks' reruns.

        Args:
            failed_fits: see :func:`outcome`.
            timeout: seconds to wait for the batch to settle (None: as long as it takes).

        Returns:
            The list of the tasks' results, in the batch's order.

        Raises:
            TimeoutError: not settled within ``timeout``.
            TrainguardError: a task's trial was killed and it is not a scikit-learn fit.
        """
        if not self._settled.wait(timeout):
            raise TimeoutError(f"the batch did not finish within {timeout} s")
        if self._parts is None:
            return outcome(self._batch, self.items, failed_fits)
        results: list[Any] = []
        for part, item in zip(self._parts, self.items, strict=True):
            results.extend(outcome(part, [item], failed_fits))
        return results
