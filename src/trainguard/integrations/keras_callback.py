"""``MemoryCallback``: memory figures in a Keras ``fit``'s logs, and an action before memory runs out.

Per epoch (and, optionally, every N batches) it reads the process tree's RSS, the GPU memory the
framework's allocator reports (where there is a GPU) and a count of live tensors (a census without
numpy arrays), and writes them into ``logs``, so that they land in ``History`` and TensorBoard.
From the per-epoch RSS it estimates the growth per epoch with the leak statistics
(:func:`trainguard.leaks.stats.robust_slope`: Theil-Sen with a confidence interval) and, with a
``limit``, acts when memory is past it or is predicted to cross it within ``horizon_epochs``:
``"warn"``, ``"stop"`` (``model.stop_training = True``, so ``fit`` returns normally) or
``"raise"`` (:class:`trainguard.MemoryLimitError`). ``"checkpoint"``, in a trial run by
``Runner.map`` (``def train(params, ctx)``), saves the model and its optimizer at the end of an
epoch under memory pressure (the supervisor's ``Policy(soft_limit=...)``, or ``limit`` here) and
commits them with ``ctx.checkpoint``; a fresh worker resumes the fit from that epoch, after
:meth:`MemoryCallback.restore` reloads them.

Backend-neutral: it uses only ``keras.callbacks.Callback`` and trainguard's probes, which read
TensorFlow, torch and JAX allocators when those are loaded.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any

from trainguard.exceptions import ConfigError, MemoryLimitError
from trainguard.units import format_bytes, format_bytes_apart, parse_size

__all__ = ["MemoryCallback", "ACTIONS"]

logger = logging.getLogger(__name__)

ACTIONS = ("warn", "stop", "raise", "checkpoint")
#: the files ``action="checkpoint"`` writes into the checkpoint folder
WEIGHTS_FILE = "model.weights.h5"
OPTIMIZER_FILE = "optimizer.npz"

try:
    import keras as _keras
except ImportError as _err:  # pragma: no cover - trainguard.keras checks first
    raise ImportError("trainguard.keras needs Keras 3: pip install keras") from _err


def _positive_int(value: Any, name: str, example: str, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a whole number >= 1, such as {example}")
    return value


class MemoryCallback(_keras.callbacks.Callback):
    """Memory in ``fit``'s logs, a growth-per-epoch estimate, and an action near a limit.

    Keys added to the epoch logs (``prefix`` defaults to ``"memory_"``): ``rss_bytes`` (the process
    tree after the epoch), ``peak_rss_bytes`` (the largest reading during the epoch, with
    ``every_n_batches``), ``gpu_bytes`` (allocator's in-use bytes on GPUs, only where there is a
    GPU), ``live_tensors`` (live framework tensors and variables), ``growth_bytes_per_epoch`` (from
    the third epoch on). Put this callback before a ``TensorBoard`` callback in the list so that
    TensorBoard sees the keys.

    Args:
        limit: RSS of the process tree to stay under, as ``"4GB"`` or bytes; None only records.
        gpu_limit: the same for GPU memory in use (needs a GPU).
        action: ``"warn"`` (a ``RuntimeWarning``, once per cause), ``"stop"`` (clean stop after the
            current epoch or batch), ``"raise"`` (``trainguard.MemoryLimitError``) or
            ``"checkpoint"`` (in a ``Runner`` trial: at the end of an epoch under memory pressure,
            save the model and optimizer and ``ctx.checkpoint``; the fit resumes from that epoch in
            a fresh worker; call :meth:`restore` before ``fit``).
        ctx: the trial context for ``"checkpoint"`` (default: the running trial's).
        predict: also act when the growth per epoch is significant and the next ``horizon_epochs``
            epochs are predicted to cross ``limit``.
        horizon_epochs: how far ahead a predicted crossing counts (default 1: the next epoch).
        every_n_batches: also read RSS every N training batches (limit checks mid-epoch and the
            epoch's peak); None reads once per epoch.
        count_tensors: include ``live_tensors`` (a census of live objects, 0.1-0.5 s with a
            framework loaded). ``"auto"`` (default) keeps census time within 5 % of the training
            time seen so far: the key appears from the first epoch the budget allows (not at all
            in a short fit) and repeats the last count in between; True counts every epoch;
            False never.
        min_epochs: epochs of readings before a growth estimate is made (>= 3).
        confidence: confidence of the growth interval; a crossing is predicted only when the
            interval's lower end is above zero.
        prefix: the prefix of the log keys.

    Attributes:
        history: the per-epoch readings (``dict`` per epoch, the keys above without prefix, and
            ``epoch``; ``growth_bytes_per_epoch`` is None, NaN in the logs, before ``min_epochs``).
        events: what was acted on, as ``(epoch, cause, message)``.
        stopped_epoch: the epoch after which ``"stop"`` stopped training (None if it did not).

    Raises:
        ConfigError: a bad argument (``UnitError`` for a size such as ``"4 potatoes"``).
    """

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
        self._ctx = ctx
        self._checkpoint_wanted = False
        self.limit_bytes = parse_size(limit, name="limit", allow_none=True)
        self.gpu_limit_bytes = parse_size(gpu_limit, name="gpu_limit", allow_none=True)
        if action not in ACTIONS:
            raise ConfigError(f"action={action!r} must be one of 'warn', 'stop', 'raise', 'checkpoint'")
        if not isinstance(predict, bool):
            raise ConfigError(f"predict must be True or False, not {predict!r}")
        self.horizon_epochs = int(_positive_int(horizon_epochs, "horizon_epochs", "1") or 0)
        self.every_n_batches = _positive_int(every_n_batches, "every_n_batches", "50", allow_none=True)
        self.min_epochs = int(_positive_int(min_epochs, "min_epochs", "3") or 0)
        if self.min_epochs < 3:
            raise ConfigError(f"min_epochs={min_epochs!r} must be >= 3: a slope needs 3 readings")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
            raise ConfigError(f"confidence={confidence!r} must be between 0 and 1, such as 0.95")
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a string such as 'memory_', not {prefix!r}")
        self.action = action
        self.predict = predict
        if count_tensors not in (True, False, "auto"):
            raise ConfigError(f"count_tensors={count_tensors!r} must be True, False or 'auto'")
        self.count_tensors = count_tensors
        self.confidence = float(confidence)
        self.prefix = prefix
        self.history: list[dict[str, Any]] = []
        self.events: list[tuple[int, str, str]] = []
        self.stopped_epoch: int | None = None
        self._warned: set[str] = set()
        self._epoch_peak = 0
        self._batches = 0
        self._epoch_start = 0.0
        self._census_s: float | None = None
        self._spent_s = 0.0
        self._train_s = 0.0
        self._tensors: int | None = None

    # -- readings ---------------------------------------------------------------------------------

    @staticmethod
    def _rss() -> int:
        from trainguard.process import tree_memory

        return int(tree_memory(os.getpid()).rss_bytes)

    @staticmethod
    def _gpu() -> int | None:
        from trainguard.frameworks import gpu_allocated_bytes

        return gpu_allocated_bytes()

    @staticmethod
    def _live_tensors() -> int:
        from trainguard.probes.census import census

        result = census(numpy=False, graph_objects=False, stack_locals=False)
        # a Keras variable wraps a backend tensor that is counted under its framework already
        return sum(e.count for e in result.entries if e.framework != "keras")

    # -- Keras hooks ------------------------------------------------------------------------------

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.history = []
        self.events = []
        self.stopped_epoch = None
        self._warned = set()
        self._epoch_peak = 0
        self._batches = 0
        if self.action == "checkpoint":
            self._context()  # outside a Runner's trial: one line before the first epoch

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_peak = 0
        self._epoch_start = time.perf_counter()

    def _count(self) -> int | None:
        """The live-tensor count, or None while ``"auto"`` has had no budget for a census yet.

        ``"auto"`` keeps the time spent in censuses within 5 % of the training time this callback
        has seen (across fits): a census runs when the budget covers its expected cost (the last
        census's, or 0.5 s before the first); in between the last count is
        repeated.
        """
        self._train_s += time.perf_counter() - self._epoch_start
        if self.count_tensors == "auto":
            # before the first census its cost is taken as 0.5 s (measured 0.1-0.5 s with a framework
            # loaded); estimating it from len(gc.get_objects()) costs as much as a census
            expected = 0.5 if self._census_s is None else self._census_s
            if self._spent_s + expected > 0.05 * self._train_s:
                return self._tensors
        start = time.perf_counter()
        self._tensors = self._live_tensors()
        self._census_s = time.perf_counter() - start
        self._spent_s += self._census_s
        return self._tensors

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.every_n_batches is None:
            return
        self._batches += 1
        if self._batches % self.every_n_batches:
            return
        rss = self._rss()
        self._epoch_peak = max(self._epoch_peak, rss)
        if self.limit_bytes is not None and rss > self.limit_bytes:
            epoch = len(self.history)
            self._act(
                epoch,
                "limit",
                "RSS {} is past the limit {} ".format(*format_bytes_apart(rss, self.limit_bytes))
                + f"(epoch {epoch}, batch {batch})",
            )

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        rss = self._rss()
        reading: dict[str, Any] = {"rss_bytes": rss, "peak_rss_bytes": max(rss, self._epoch_peak)}
        gpu = self._gpu()
        if gpu is not None:
            reading["gpu_bytes"] = gpu
        if self.count_tensors:
            tensors = self._count()
            if tensors is not None:
                reading["live_tensors"] = tensors
        self.history.append(reading)
        estimate = self._growth()
        # every epoch carries the growth key (None here, NaN in the logs, before there is an
        # estimate), so Keras' History lists it epoch by epoch instead of shifted to the first ones
        reading["growth_bytes_per_epoch"] = estimate.slope if estimate is not None else None
        if logs is not None:
            for key, value in reading.items():
                logs[self.prefix + key] = float("nan") if value is None else float(value)
        reading["epoch"] = epoch
        self._check(epoch, reading, estimate)
        if self.action == "checkpoint":
            self._checkpoint_if_pressed(epoch)

    # -- checkpoint under pressure ------------------------------------------------------------------

    def _context(self) -> Any:
        if self._ctx is None:
            from trainguard.runner import current_context

            self._ctx = current_context()
        if self._ctx is None:
            raise ConfigError(
                "MemoryCallback(action='checkpoint') needs a trial context: run the fit in a trial "
                "def train(params, ctx) through trainguard.Runner.map, or pass ctx="
            )
        return self._ctx

    def restore(self, model: Any) -> int:
        """Before ``fit``: when the trial resumed from a checkpoint this callback wrote, load the
        model's weights and its optimizer's state; returns the epoch to pass as ``initial_epoch``
        (0 on a fresh start).

        Args:
            model: the compiled Keras model.

        Returns:
            The epoch to start from.

        Raises:
            ConfigError: the checkpoint's optimizer state does not match the model's optimizer.
        """
        ctx = self._context()
        if not ctx.resumed:
            return 0
        state = ctx.restore(default=None) or {}
        folder = ctx.restore_path
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            optimizer.build(model.trainable_variables)  # before the weights, which hold its slots too
        model.load_weights(os.path.join(folder, WEIGHTS_FILE))
        optimizer_file = os.path.join(folder, OPTIMIZER_FILE)
        if os.path.exists(optimizer_file) and optimizer is not None:
            import numpy as np

            with np.load(optimizer_file) as saved:
                values = [saved[f"v{i}"] for i in range(len(saved.files))]
            if len(values) != len(optimizer.variables):
                raise ConfigError(
                    f"the checkpoint's optimizer has {len(values)} variables and this model's "
                    f"{len(optimizer.variables)}: build the same model and optimizer as the trial that wrote it"
                )
            for variable, value in zip(optimizer.variables, values, strict=True):
                variable.assign(value)
        return int(state.get("epoch", 0))

    def _checkpoint_if_pressed(self, epoch: int) -> None:
        ctx = self._context()
        if not (ctx.safe_point() or self._checkpoint_wanted):
            return
        self._checkpoint_wanted = False
        from trainguard.exceptions import CheckpointError

        folder = ctx.checkpoint_path
        try:
            self.model.save_weights(os.path.join(folder, WEIGHTS_FILE))
            optimizer = getattr(self.model, "optimizer", None)
            if optimizer is not None and optimizer.built:
                import numpy as np

                arrays = {f"v{i}": _keras.ops.convert_to_numpy(v) for i, v in enumerate(optimizer.variables)}
                np.savez(os.path.join(folder, OPTIMIZER_FILE), **arrays)
        except OSError as err:
            raise CheckpointError(
                f"MemoryCallback(action='checkpoint'): the model of epoch {epoch} could not be saved "
                f"({type(err).__name__}: {err}); the earlier checkpoint is kept"
            ) from None
        epochs = int((self.params or {}).get("epochs") or 0)
        remaining = max(epochs - epoch - 1, 0) if epochs else None
        self.events.append((epoch, "checkpoint", f"checkpointed after epoch {epoch} under memory pressure"))
        ctx.checkpoint({"epoch": epoch + 1}, remaining=remaining)  # may end this worker here

    # -- decisions --------------------------------------------------------------------------------

    def _growth(self) -> Any:
        if len(self.history) < self.min_epochs:
            return None
        from trainguard.leaks.stats import robust_slope

        series = [h["rss_bytes"] for h in self.history]
        return robust_slope(series, confidence=self.confidence, resolution=4096.0)

    def _check(self, epoch: int, reading: dict[str, Any], estimate: Any) -> None:
        rss = reading["rss_bytes"]
        if self.limit_bytes is not None:
            if reading["peak_rss_bytes"] > self.limit_bytes:
                self._act(
                    epoch,
                    "limit",
                    "RSS {} is past the limit {} ".format(
                        *format_bytes_apart(reading["peak_rss_bytes"], self.limit_bytes)
                    )
                    + f"after epoch {epoch}",
                )
                return
            if self.predict and estimate is not None and estimate.ci_low > 0:
                ahead = rss + estimate.slope * self.horizon_epochs
                if ahead > self.limit_bytes:
                    epochs_left = (self.limit_bytes - rss) / estimate.slope
                    now, cap = format_bytes_apart(rss, self.limit_bytes)  # never "1.9 GiB ... 1.9 GiB"
                    self._act(
                        epoch,
                        "predicted",
                        f"RSS grows {format_bytes(estimate.slope)}/epoch "
                        f"(95% CI {format_bytes(estimate.ci_low)} .. {format_bytes(estimate.ci_high)}); at "
                        f"{now} after epoch {epoch} it is predicted to cross the limit {cap} "
                        f"in {max(epochs_left, 0):.1f} epochs",
                    )
                    return
        gpu = reading.get("gpu_bytes")
        if self.gpu_limit_bytes is not None and gpu is not None and gpu > self.gpu_limit_bytes:
            self._act(
                epoch,
                "gpu_limit",
                "GPU memory in use {} is past the limit {} ".format(
                    *format_bytes_apart(gpu, self.gpu_limit_bytes)
                )
                + f"after epoch {epoch}",
            )

    def _act(self, epoch: int, cause: str, message: str) -> None:
        self.events.append((epoch, cause, message))
        if self.action == "checkpoint":
            self._checkpoint_wanted = True  # at the end of this epoch
            return
        if self.action == "raise":
            raise MemoryLimitError(
                f"trainguard.keras.MemoryCallback: {message}",
                limit_bytes=self.limit_bytes,
                epoch=epoch,
                cause=cause,
            )
        if self.action == "stop":
            if self.model is not None:
                self.model.stop_training = True
            if self.stopped_epoch is None:
                self.stopped_epoch = epoch
                logger.warning("trainguard MemoryCallback stops training: %s", message)
            return
        if cause not in self._warned:
            self._warned.add(cause)
            warnings.warn(f"trainguard MemoryCallback: {message}", RuntimeWarning, stacklevel=2)

    def __repr__(self) -> str:
        limit = format_bytes(self.limit_bytes) if self.limit_bytes is not None else None
        return f"MemoryCallback(limit={limit!r}, action={self.action!r})"
