"""``MemoryCallback`` for PyTorch Lightning: memory in the logged metrics, and an action before
memory runs out.

The same callback as :class:`trainguard.keras.MemoryCallback`, in Lightning's words: the readings
and the decision are the shared :class:`~trainguard.integrations._memory_watch.MemoryWatch`'s;
this shell reads memory at Lightning's hooks and carries the answer out. ``"stop"`` sets
``trainer.should_stop`` (``fit`` returns normally after the batch or epoch); ``"checkpoint"``, in
a trial run by ``Runner.map``, writes ``trainer.save_checkpoint`` at the end of the epoch under
memory pressure (model, optimizers, schedulers, loops, and the random generators' states, which
Lightning's checkpoint leaves out) and commits it with ``ctx.checkpoint``;
:meth:`MemoryCallback.restore` gives the file to pass as ``trainer.fit(model, ckpt_path=...)`` in
the fresh worker that carries the trial on.
"""

from __future__ import annotations

import os
from typing import Any

from trainguard.integrations._callback_shell import CallbackShell, save_error

__all__ = ["MemoryCallback", "CHECKPOINT_FILE"]

#: the file inside a committed checkpoint that holds Lightning's checkpoint
CHECKPOINT_FILE = "lightning.ckpt"
#: where in Lightning's checkpoint this callback keeps the random generators' states
RNG_KEY = "trainguard_rng_states"


def rng_states() -> dict[str, Any]:
    """The states of torch's generators (CPU, and CUDA where initialised), numpy's global one and
    Python's ``random``, as tensors and plain numbers (what ``torch.load(weights_only=True)``,
    Lightning's default, reads back).

    Returns:
        The states, for :func:`set_rng_states`.
    """
    import random

    import numpy as np
    import torch

    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (
            str(name),
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(pos),
            int(has_gauss),
            float(cached),
        ),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Put back what :func:`rng_states` read.

    Args:
        states: the states.
    """
    import random

    import numpy as np
    import torch

    torch.set_rng_state(states["torch"])
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


try:
    from lightning.pytorch.callbacks import Callback as _Callback
except ImportError as _err:  # pragma: no cover - trainguard.lightning checks first
    raise ImportError("trainguard.lightning needs lightning: pip install lightning") from _err


class MemoryCallback(CallbackShell, _Callback):
    """Memory in Lightning's logged metrics, a growth-per-epoch estimate, and an action near a limit.

    Logged at the end of each training epoch with ``pl_module.log_dict`` (so in
    ``trainer.callback_metrics`` and the loggers; ``prefix`` defaults to ``"memory_"``):
    ``rss_bytes`` (the process tree), ``peak_rss_bytes`` (the largest reading of the epoch, with
    ``every_n_batches``), ``gpu_bytes`` (the torch allocator's in-use bytes on GPUs, only where
    there is a GPU), ``live_tensors`` (live torch tensors) and ``growth_bytes_per_epoch`` (NaN
    before the third epoch). Lightning logs them as float32 tensors (a figure near 1 GiB to about
    100 bytes); :attr:`history` keeps the exact bytes.

    Args:
        limit: RSS of the process tree to stay under, as ``"4GB"`` or bytes; None only records.
        gpu_limit: the same for GPU memory in use (needs a GPU).
        action: ``"warn"`` (a ``RuntimeWarning``, once per cause), ``"stop"`` (clean stop after the
            current batch or epoch), ``"raise"`` (``trainguard.MemoryLimitError``) or
            ``"checkpoint"`` (in a ``Runner`` trial: at the end of an epoch under memory pressure,
            ``trainer.save_checkpoint`` and ``ctx.checkpoint``; the fit goes on from there in a
            fresh worker: pass :meth:`restore` to ``trainer.fit(model, ckpt_path=...)``).
        predict: also act when the growth per epoch is significant and the next ``horizon_epochs``
            epochs are predicted to cross ``limit``.
        horizon_epochs: how far ahead a predicted crossing counts (default 1: the next epoch).
        every_n_batches: also read RSS every N training batches (limit checks inside an epoch,
            and the epoch's peak); None reads once per epoch.
        count_tensors: include ``live_tensors``: ``"auto"`` (default) keeps the census within 5 %
            of the training time; True every epoch; False never.
        min_epochs: epochs of readings before a growth estimate is made (>= 3).
        confidence: confidence of the growth interval.
        prefix: the prefix of the logged names.
        ctx: the trial context for ``"checkpoint"`` (default: the running trial's).

    Attributes:
        history: the per-epoch readings (the keys above without prefix, and ``epoch``).
        events: what was acted on, as ``(epoch, cause, message)``.
        stopped_epoch: the epoch after which ``"stop"`` stopped training (None if it did not).

    Raises:
        ConfigError: a bad argument (``UnitError`` for a size such as ``"4 potatoes"``).
    """

    _name = "trainguard.lightning.MemoryCallback"  # the options are CallbackShell.__init__'s
    _saving = False  # True while this callback's own checkpoint is being saved

    # -- Lightning hooks --------------------------------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._train_begins()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_begins()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        rss = self._batch_rss()
        if rss is not None:
            self._carry_out(self.watch.on_batch(rss, f"batch {batch_idx}"), trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        rss = self._rss()
        reading = self._epoch_reading(rss, max(rss, self._epoch_peak))
        epoch = int(trainer.current_epoch)
        estimate = self.watch.record(epoch, reading)
        pl_module.log_dict(self.watch.log_values(reading, self.prefix), on_step=False, on_epoch=True)
        self._carry_out(self.watch.decide(reading, estimate), trainer)
        if self._checkpoint_due():
            self._checkpoint(trainer, epoch)

    def _carry_out(self, response: str | None, trainer: Any) -> None:
        if response == "checkpoint":
            self._checkpoint_wanted = True  # at the end of this epoch
        elif response == "stop":
            trainer.should_stop = True

    # -- checkpoint and resume --------------------------------------------------------------------

    def _checkpoint(self, trainer: Any, epoch: int) -> None:
        ctx = self._ctx
        self._saving = True
        try:
            trainer.save_checkpoint(os.path.join(ctx.checkpoint_path, CHECKPOINT_FILE))
        except OSError as err:
            raise save_error(f"the checkpoint of epoch {epoch} could not be saved", err) from None
        finally:
            self._saving = False
        epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        self._commit_checkpoint(epoch, {"epoch": epoch + 1}, epochs)  # may end this worker here

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        # Lightning's checkpoint holds no generator states: without them the resumed epochs
        # shuffle differently from the uninterrupted fit's
        if self._saving:
            checkpoint[RNG_KEY] = rng_states()

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get(RNG_KEY)
        if states is not None:
            set_rng_states(states)

    def restore(self) -> str | None:
        """Before ``fit``: the checkpoint file to resume from when the trial resumed from a
        checkpoint this callback committed, else None (a fresh start)::

            trainer.fit(model, ckpt_path=callback.restore())

        Returns:
            The file, or None.

        Raises:
            ConfigError: no trial context (the fit does not run in a ``Runner`` trial).
        """
        return self._resume_target(CHECKPOINT_FILE, os.path.isfile)
