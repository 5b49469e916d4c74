"""What the three MemoryCallbacks (Keras, the Hugging Face Trainer, Lightning) share around the one
decision (:mod:`~trainguard.integrations._memory_watch`): the options checked and kept (the Keras
and Lightning callbacks take the same ones, so their ``__init__`` is this one), the record read
through the watch, the start of training and of an epoch, an epoch's reading, the reading every N
batches, the trial context, whether an epoch's end checkpoints, the error of a failed save, the
checkpoint noted and committed, the checkpoint to resume from, and the readings a test may replace
with a recorded series. Each framework's callback keeps only its hooks."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from trainguard.exceptions import CheckpointError, ConfigError
from trainguard.integrations import _memory_readings as readings
from trainguard.integrations._memory_watch import MemoryWatch, positive_int, trial_context

__all__ = ["CallbackShell", "save_error"]


def save_error(what: str, err: OSError) -> CheckpointError:
    """The error of a checkpoint the framework could not write, ``what`` saying which and why
    (``"the model of epoch 3 could not be saved"``): the committed one before it stays."""
    return CheckpointError(
        f"MemoryCallback(action='checkpoint'): {what} ({type(err).__name__}: {err}); "
        "the earlier checkpoint is kept"
    )


class CallbackShell:
    """A mixin, before the framework's callback base: its ``__init__`` takes the options of the
    Keras and Lightning callbacks (documented on each), ``_set_up`` serves the Trainer's too."""

    watch: MemoryWatch
    every_n_batches: int | None
    #: the callback's name in messages, such as ``"trainguard.keras.MemoryCallback"``
    _name: str

    def __init__(
        self,
        limit: str | int | None = None,
        *,
        gpu_limit: str | int | None = None,
        action: str = "warn",
        predict: bool = True,
        horizon_epochs: int = 1,
        every_n_batches: int | None = None,
        count_tensors: bool | str = "auto",
        min_epochs: int = 3,
        confidence: float = 0.95,
        prefix: str = "memory_",
        ctx: Any = None,
    ) -> None:
        super().__init__()
        self._set_up(
            self._name,
            every=("every_n_batches", every_n_batches),
            count_tensors=count_tensors,
            prefix=prefix,
            ctx=ctx,
            limit=limit,
            gpu_limit=gpu_limit,
            action=action,
            predict=predict,
            horizon_epochs=horizon_epochs,
            min_epochs=min_epochs,
            confidence=confidence,
        )
        self._batches = 0

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

    # -- what the hooks share -----------------------------------------------------------------------

    def _train_begins(self) -> None:
        """At the start of training: a fresh record and counters; with ``"checkpoint"``, the trial
        context found now (outside a ``Runner`` trial: one error before the first batch)."""
        self.watch.begin()
        self._epoch_peak = 0
        self._batches = 0
        if self.action == "checkpoint":
            self._context()

    def _epoch_begins(self) -> None:
        """At the start of an epoch: its peak and its start time (the census's time budget)."""
        self._epoch_peak = 0
        self._epoch_start = time.perf_counter()

    def _batch_rss(self) -> int | None:
        """At a batch's end: every ``every_n_batches``-th batch, the RSS read (and kept in the
        epoch's peak); None between readings or without ``every_n_batches``."""
        if self.every_n_batches is None:
            return None
        self._batches += 1
        if self._batches % self.every_n_batches:
            return None
        rss = self._rss()
        self._epoch_peak = max(self._epoch_peak, rss)
        return rss

    def _epoch_reading(self, rss: int, peak: int) -> dict[str, Any]:
        """An epoch's reading: RSS and its peak, the GPU bytes where there is a GPU, and the live
        tensors where the census counted this epoch."""
        reading: dict[str, Any] = {"rss_bytes": rss, "peak_rss_bytes": peak}
        gpu = self._gpu()
        if gpu is not None:
            reading["gpu_bytes"] = gpu
        tensors = self._counter.count(time.perf_counter() - self._epoch_start, self._live_tensors)
        if tensors is not None:
            reading["live_tensors"] = tensors
        return reading

    def _context(self) -> Any:
        """The trial context ``"checkpoint"`` commits to: the one given, else the running trial's,
        found once and kept (none: ``ConfigError``)."""
        self._ctx = trial_context(self._ctx, "MemoryCallback")
        return self._ctx

    def _checkpoint_due(self) -> bool:
        """At an epoch's end: whether ``"checkpoint"`` saves now, asked for during the epoch or
        at the supervisor's safe point (asked only when the epoch did not ask); the request is
        then cleared."""
        if self.action != "checkpoint" or not (self._checkpoint_wanted or self._ctx.safe_point()):
            return False
        self._checkpoint_wanted = False
        return True

    def _commit_checkpoint(self, epoch: int, state: dict[str, Any], total_epochs: int | None) -> None:
        """After the framework saved epoch ``epoch``: note it in ``events`` and commit it with
        ``ctx.checkpoint`` (which may end this worker here, to resume in a fresh one)."""
        remaining = max(total_epochs - epoch - 1, 0) if total_epochs else None
        self.watch.events.append(
            (epoch, "checkpoint", f"checkpointed after epoch {epoch} under memory pressure")
        )
        self._ctx.checkpoint(state, remaining=remaining)

    def _resume_target(self, name: str, exists: Callable[[str], bool]) -> str | None:
        """The file or folder ``name`` in the checkpoint this trial resumed from, when there is
        one (``exists`` says so), else None (a fresh start)."""
        ctx = self._context()
        if not ctx.resumed or ctx.restore_path is None:
            return None
        path = os.path.join(ctx.restore_path, name)
        return path if exists(path) else None

    def __repr__(self) -> str:
        return f"MemoryCallback(limit={self.watch.describe_limit()!r}, action={self.action!r})"
