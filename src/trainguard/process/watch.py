"""The one watchdog loop: at a fixed rate, read the trees, check them against the limits, act.

Four parts of trainguard watch memory from a thread at a fixed rate: the local session (every
worker's tree, killed at a hard limit or the run's budget), the Ray slot agent (the trees it hosts,
killed on their node), the :class:`~trainguard.process.sampler.Sampler` (probes into a timeline)
and ``scope`` (a peak). Each gives a :class:`Watchdog` its tick: one "read the tree -> check the
limits -> act" pass. The loop itself is written once, here: the schedule (no burst to catch up after
a slow pass), the stop, and a failed pass logged and skipped (a watcher must outlive any one bad
reading). The Ray agent, which also waits on its workers' pipes, drives the same
:class:`Schedule` from its ``select`` loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Schedule", "Watchdog"]

logger = logging.getLogger(__name__)


class Schedule:
    """Ticks every ``interval_s`` (a number, or a function read at each tick); one that falls
    behind (a slow pass) starts again from now instead of bursting to catch up."""

    def __init__(self, interval_s: float | Callable[[], float], *, start_now: bool = False) -> None:
        self._interval = interval_s
        self._next = time.monotonic() + (0.0 if start_now else self.interval_s)

    @property
    def interval_s(self) -> float:
        return float(self._interval() if callable(self._interval) else self._interval)

    def delay(self) -> float:
        """Seconds until the next tick (0 when it is due)."""
        return max(0.0, self._next - time.monotonic())

    def due(self) -> bool:
        """Whether a tick is due now; if so the next one is scheduled."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next += self.interval_s
        if self._next < now:  # fell behind: do not burst to catch up
            self._next = now + self.interval_s
        return True


class Watchdog:
    """A daemon thread that runs ``tick()`` (read -> check -> act) on a :class:`Schedule` until
    :meth:`stop`. A tick that raises is logged with ``what`` and the loop goes on."""

    def __init__(
        self,
        tick: Callable[[], object],
        interval_s: float | Callable[[], float],
        *,
        name: str,
        what: str = "memory sampling",
    ) -> None:
        self._tick = tick
        self._schedule = Schedule(interval_s)
        self._stop = threading.Event()
        self._what = what
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._schedule.delay()):
            if not self._schedule.due():
                continue
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad reading
                logger.exception("%s failed", self._what)

    def stop(self, timeout_s: float | None = 2.0) -> None:
        """Stop the loop and wait up to ``timeout_s`` for its last tick (idempotent)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()
