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

import os
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.integrations._callback_shell import CallbackShell, save_error
from trainguard.integrations._memory_watch import ACTIONS

__all__ = ["MemoryCallback", "ACTIONS"]
#: the files ``action="checkpoint"`` writes into the checkpoint folder
WEIGHTS_FILE = "model.weights.h5"
OPTIMIZER_FILE = "optimizer.npz"

try:
    import keras as _keras
except ImportError as _err:  # pragma: no cover - trainguard.keras checks first
    raise ImportError("trainguard.keras needs Keras 3: pip install keras") from _err


class MemoryCallback(CallbackShell, _keras.callbacks.Callback):
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

    _name = "trainguard.keras.MemoryCallback"  # the options are CallbackShell.__init__'s

    predict = property(lambda self: self.watch.predict)
    horizon_epochs = property(lambda self: self.watch.horizon_epochs)
    min_epochs = property(lambda self: self.watch.min_epochs)
    confidence = property(lambda self: self.watch.confidence)
    count_tensors = property(lambda self: self._counter.mode)

    # -- Keras hooks ------------------------------------------------------------------------------

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._train_begins()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_begins()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        rss = self._batch_rss()
        if rss is not None:
            self._carry_out(self.watch.on_batch(rss, f"batch {batch}"))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        rss = self._rss()
        reading = self._epoch_reading(rss, max(rss, self._epoch_peak))
        estimate = self.watch.record(epoch, reading)
        if logs is not None:
            logs.update(self.watch.log_values(reading, self.prefix))
        self._carry_out(self.watch.decide(reading, estimate))
        if self.action == "checkpoint":
            self._checkpoint_if_pressed(epoch)

    def _carry_out(self, response: str | None) -> None:
        if response == "checkpoint":
            self._checkpoint_wanted = True  # at the end of this epoch
        elif response == "stop" and self.model is not None:
            self.model.stop_training = True

    # -- checkpoint under pressure ------------------------------------------------------------------

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
        # safe_point() first, every epoch (it runs the on_pressure callbacks), unlike _checkpoint_due
        if not (ctx.safe_point() or self._checkpoint_wanted):
            return
        self._checkpoint_wanted = False
        folder = ctx.checkpoint_path
        try:
            self.model.save_weights(os.path.join(folder, WEIGHTS_FILE))
            optimizer = getattr(self.model, "optimizer", None)
            if optimizer is not None and optimizer.built:
                import numpy as np

                arrays = {f"v{i}": _keras.ops.convert_to_numpy(v) for i, v in enumerate(optimizer.variables)}
                np.savez(os.path.join(folder, OPTIMIZER_FILE), **arrays)
        except OSError as err:
            raise save_error(f"the model of epoch {epoch} could not be saved", err) from None
        self._commit_checkpoint(epoch, {"epoch": epoch + 1}, int((self.params or {}).get("epochs") or 0))
