"""``MemoryCallback`` for the Hugging Face ``Trainer``: memory in its logs, and an action before
memory runs out.

The same callback as :class:`trainguard.keras.MemoryCallback`, in the ``Trainer``'s words: the
readings and the decision are the shared :class:`~trainguard.integrations._memory_watch.MemoryWatch`'s;
this shell reads memory at the ``Trainer``'s hooks and carries the answer out. ``"stop"`` sets
``control.should_training_stop`` (``train()`` returns normally after the step or epoch);
``"checkpoint"``, in a trial run by ``Runner.map``, has the ``Trainer`` save its own checkpoint
(model, optimizer, scheduler, RNG states, trainer state) at the end of the epoch under memory
pressure, commits a copy with ``ctx.checkpoint``, and :meth:`MemoryCallback.restore` gives the
folder to pass as ``trainer.train(resume_from_checkpoint=...)`` in the fresh worker that carries
the trial on.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from trainguard.integrations._callback_shell import CallbackShell, save_error

__all__ = ["MemoryCallback", "CHECKPOINT_FOLDER"]

#: the folder inside a committed checkpoint that holds the Trainer's own checkpoint
CHECKPOINT_FOLDER = "trainer"

try:
    import transformers as _transformers
except ImportError as _err:  # pragma: no cover - trainguard.transformers checks first
    raise ImportError("trainguard.transformers needs transformers: pip install transformers") from _err


class MemoryCallback(_transformers.TrainerCallback, CallbackShell):
    """Memory in the ``Trainer``'s logs, a growth-per-epoch estimate, and an action near a limit.

    Keys added to every log the ``Trainer`` writes (``trainer.state.log_history`` and what the
    printer shows; ``prefix`` defaults to ``"memory_"``): ``rss_bytes`` (the process tree now),
    ``peak_rss_bytes`` (the largest reading since the last log, with ``every_n_steps``),
    ``gpu_bytes`` (the torch allocator's in-use bytes on GPUs, only where there is a GPU),
    ``live_tensors`` (live torch tensors, the last count) and ``growth_bytes_per_epoch`` (NaN
    before the third epoch). The ``report_to`` integrations (TensorBoard, W&B...) are called
    before the callbacks passed to ``Trainer(callbacks=...)``, so they see the keys only when this
    callback is put before them (``trainer.pop_callback(TensorBoardCallback)``, then add it back).

    Args:
        limit: RSS of the process tree to stay under, as ``"4GB"`` or bytes; None only records.
        gpu_limit: the same for GPU memory in use (needs a GPU).
        action: ``"warn"`` (a ``RuntimeWarning``, once per cause), ``"stop"`` (clean stop after the
            current step or epoch), ``"raise"`` (``trainguard.MemoryLimitError``) or
            ``"checkpoint"`` (in a ``Runner`` trial: at the end of an epoch under memory pressure,
            the ``Trainer`` saves its checkpoint and ``ctx.checkpoint`` commits it; the training
            goes on from there in a fresh worker: pass :meth:`restore` to
            ``trainer.train(resume_from_checkpoint=...)``).
        predict: also act when the growth per epoch is significant and the next ``horizon_epochs``
            epochs are predicted to cross ``limit``.
        horizon_epochs: how far ahead a predicted crossing counts (default 1: the next epoch).
        every_n_steps: also read RSS every N optimizer steps (limit checks inside an epoch, and
            the peak); None reads at the epochs' ends and at each log.
        count_tensors: include ``live_tensors``: ``"auto"`` (default) keeps the census within 5 %
            of the training time; True every epoch; False never.
        min_epochs: epochs of readings before a growth estimate is made (>= 3).
        confidence: confidence of the growth interval.
        prefix: the prefix of the log keys.
        ctx: the trial context for ``"checkpoint"`` (default: the running trial's).

    Attributes:
        history: the per-epoch readings (``rss_bytes``, ``peak_rss_bytes``, ``gpu_bytes``,
            ``live_tensors``, ``growth_bytes_per_epoch``, ``epoch``).
        events: what was acted on, as ``(epoch, cause, message)``.
        stopped_epoch: the epoch after which ``"stop"`` stopped training (None if it did not).

    Raises:
        ConfigError: a bad argument (``UnitError`` for a size such as ``"4 potatoes"``).
    """

    every_n_steps: int | None  # checked and set by CallbackShell._set_up

    def __init__(
        self,
        limit: str | int | None = None,
        *,
        gpu_limit: str | int | None = None,
        action: str = "warn",
        predict: bool = True,
        horizon_epochs: int = 1,
        every_n_steps: int | None = None,
        count_tensors: bool | str = "auto",
        min_epochs: int = 3,
        confidence: float = 0.95,
        prefix: str = "memory_",
        ctx: Any = None,
    ) -> None:
        self._set_up(
            "trainguard.transformers.MemoryCallback",
            every=("every_n_steps", every_n_steps),
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
        self._saving_epoch: int | None = None
        self._log_peak = 0

    def _read(self) -> int:
        rss = self._rss()
        self._epoch_peak = max(self._epoch_peak, rss)
        self._log_peak = max(self._log_peak, rss)
        return rss

    # -- Trainer hooks ----------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._log_peak = 0
        self._saving_epoch = None
        self._train_begins()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._epoch_begins()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every_n_steps is None or state.global_step % self.every_n_steps:
            return
        response = self.watch.on_batch(self._read(), f"step {state.global_step}")
        self._carry_out(response, control)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        reading = self._epoch_reading(self._read(), self._epoch_peak)
        # the epoch that ended, counted from the start of training (a resumed run goes on counting)
        epoch = round(state.epoch) - 1 if state.epoch else len(self.history)
        estimate = self.watch.record(epoch, reading)
        self._carry_out(self.watch.decide(reading, estimate), control)
        if self._checkpoint_due():
            self._saving_epoch = epoch
            control.should_save = True  # the Trainer saves right after this hook, then calls on_save

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None:
            return
        rss = self._read()
        values: dict[str, Any] = {"rss_bytes": rss, "peak_rss_bytes": self._log_peak}
        gpu = self._gpu()
        if gpu is not None:
            values["gpu_bytes"] = gpu
        last = self.history[-1] if self.history else {}
        if last.get("live_tensors") is not None:
            values["live_tensors"] = last["live_tensors"]
        values["growth_bytes_per_epoch"] = last.get("growth_bytes_per_epoch")
        self._log_peak = 0
        added = self.watch.log_values(values, self.prefix)
        # Trainer.log stored a copy of these logs in log_history before calling the callbacks
        stored = state.log_history[-1] if state.log_history else None
        if stored is not None and all(
            stored.get(key) is value or stored.get(key) == value for key, value in logs.items()
        ):
            stored.update(added)
        logs.update(added)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._saving_epoch is None:
            return
        epoch, self._saving_epoch = self._saving_epoch, None
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        source = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        ctx = self._ctx
        try:
            target = os.path.join(ctx.checkpoint_path, CHECKPOINT_FOLDER)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target)
        except OSError as err:
            raise save_error(f"the Trainer's checkpoint of epoch {epoch} could not be kept", err) from None
        total = int(args.num_train_epochs) if args.max_steps is None or args.max_steps <= 0 else 0
        self._commit_checkpoint(epoch, {"epoch": epoch + 1, "global_step": state.global_step}, total)

    def _carry_out(self, response: str | None, control: Any) -> None:
        if response == "checkpoint":
            self._checkpoint_wanted = True  # at the end of this epoch
        elif response == "stop":
            control.should_training_stop = True

    # -- resume -----------------------------------------------------------------------------------

    def restore(self) -> str | None:
        """Before ``train``: the checkpoint folder to resume from when the trial resumed from a
        checkpoint this callback committed, else None (a fresh start)::

            trainer.train(resume_from_checkpoint=callback.restore())

        Returns:
            The folder, or None.

        Raises:
            ConfigError: no trial context (the training does not run in a ``Runner`` trial).
        """
        return self._resume_target(CHECKPOINT_FOLDER, os.path.isdir)
