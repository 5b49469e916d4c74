"""What the three MemoryCallbacks (Keras, the Hugging Face Trainer, Lightning) share around the one
decision (:mod:`~trainguard.integrations._memory_watch`): the options checked and kept, the record
read through the watch, and the readings a test may replace with a recorded series. Each
framework's callback keeps only its hooks."""

from __future__ import annotations

from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.integrations import _memory_readings as readings
from trainguard.integrations._memory_watch import MemoryWatch, positive_int

__all__ = ["CallbackShell"]


class CallbackShell:
    """A mixin (no ``__init__`` of its own, beside the framework's callback base)."""

    watch: MemoryWatch

    def _set_up(
        self,
        name: str,
        *,
        every: tuple[str, int | None],
        count_tensors: bool | str,
        prefix: str,
        ctx: Any,
        **watch_options: Any,
    ) -> None:
        """Check and keep the options; ``every`` is the name and value of the framework's reading
        interval (``every_n_batches`` or ``every_n_steps``)."""
        self.watch = MemoryWatch(name, **watch_options)
        every_name, every_value = every
        setattr(self, every_name, positive_int(every_value, every_name, "50", allow_none=True))
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a string such as 'memory_', not {prefix!r}")
        self._counter = readings.TensorCounter(count_tensors)
        self.prefix = prefix
        self._ctx = ctx
        self._checkpoint_wanted = False
        self._epoch_peak = 0
        self._epoch_start = 0.0

    # the options and the record live in the shared watch (one owner of the decision)
    limit_bytes = property(lambda self: self.watch.limit_bytes)
    gpu_limit_bytes = property(lambda self: self.watch.gpu_limit_bytes)
    action = property(lambda self: self.watch.action)
    history = property(lambda self: self.watch.history)
    events = property(lambda self: self.watch.events)
    stopped_epoch = property(lambda self: self.watch.stopped_epoch)

    # -- readings (instance attributes may replace them: a recorded series in tests) ----------------

    @staticmethod
    def _rss() -> int:
        return readings.tree_rss()

    @staticmethod
    def _gpu() -> int | None:
        return readings.gpu_bytes()

    @staticmethod
    def _live_tensors() -> int:
        return readings.live_tensors()
