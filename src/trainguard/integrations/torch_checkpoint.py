"""``Checkpointer``: a plain PyTorch loop checkpointed under memory pressure, resumed exactly.

At the end of an epoch under pressure (``Policy(soft_limit=...)`` raised ``ctx.under_pressure``)
it writes the model's and optimizer's ``state_dict`` and the random number generators' states
(torch CPU and CUDA, numpy's global, Python's ``random``) and calls ``ctx.checkpoint``; a fresh
worker resumes the loop from the next epoch with the same generators, so a seeded training ends
with the same weights as an uninterrupted one. Tensors go to ``torch.save`` (read back with
``weights_only=True``); the generators' states of numpy and Python travel in the checkpoint's
state.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

from trainguard.exceptions import CheckpointError, ConfigError

__all__ = ["Checkpointer", "TORCH_FILE"]

TORCH_FILE = "torch.pt"


class Checkpointer:
    """Save and restore a model, its optimizer and the RNG states at a staged trial's epochs.

    Args:
        ctx: the trial's context (``def train(params, ctx)``).
        model: a ``torch.nn.Module``.
        optimizer: its ``torch.optim.Optimizer`` (or None).
        scheduler: an optional learning-rate scheduler (anything with ``state_dict``).
    """

    def __init__(self, ctx: Any, model: Any, optimizer: Any = None, *, scheduler: Any = None) -> None:
        """Save and restore a torch training's state at the trial's checkpoints.

        Args:
            ctx: the trial's context (the second argument of ``train(params, ctx)``).
            model: the ``torch.nn.Module`` to save.
            optimizer: its optimizer, saved with it.
            scheduler: a learning-rate scheduler, saved with it.

        Raises:
            ConfigError: no trial context, or ``model`` is not a ``torch.nn.Module``.
        """
        if ctx is None or not hasattr(ctx, "checkpoint"):
            raise ConfigError(
                "trainguard.torch.Checkpointer(ctx, model, optimizer) needs the trial's context: write the "
                "trial as def train(params, ctx) and run it through trainguard.Runner.map"
            )
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(
                f"Checkpointer(model=...) must be a torch.nn.Module, not {type(model).__name__}"
            )
        self.ctx = ctx
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler

    def restore(self) -> int:
        """The epoch to start from: 0 on a fresh start; after a resume, the epoch after the one
        checkpointed, with model, optimizer and generators as they were then.

        Returns:
            The epoch to start the loop from.
        """
        if not self.ctx.resumed:
            return 0
        state = self.ctx.restore(default=None) or {}
        path = os.path.join(self.ctx.restore_path, TORCH_FILE)
        saved = torch.load(path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(saved["model"])
        if self.optimizer is not None and "optimizer" in saved:
            self.optimizer.load_state_dict(saved["optimizer"])
        if self.scheduler is not None and "scheduler" in saved:
            self.scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch_rng"])
        if "cuda_rng" in saved and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        if state.get("numpy_rng") is not None:
            np.random.set_state(state["numpy_rng"])
        if state.get("python_rng") is not None:
            random.setstate(state["python_rng"])
        return int(state.get("epoch", 0))

    def save(self, epoch: int, *, remaining: int | None = None) -> None:
        """Checkpoint now, after ``epoch`` (the worker may end here and a fresh one resume).

        Args:
            epoch: the epoch that just ended.
            remaining: how many epochs are left, when known (at 0 no worker is ended here).

        Raises:
            CheckpointError: the model or optimizer could not be saved.
        """
        saved: dict[str, Any] = {"model": self.model.state_dict(), "torch_rng": torch.get_rng_state()}
        if self.optimizer is not None:
            saved["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            saved["scheduler"] = self.scheduler.state_dict()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            saved["cuda_rng"] = torch.cuda.get_rng_state_all()
        try:
            torch.save(saved, os.path.join(self.ctx.checkpoint_path, TORCH_FILE))
        except (OSError, RuntimeError) as err:  # torch reports a failed write as RuntimeError
            raise CheckpointError(
                f"trainguard.torch.Checkpointer: the model of epoch {epoch} could not be saved "
                f"({type(err).__name__}: {err}); the earlier checkpoint is kept"
            ) from None
        state = {"epoch": epoch + 1, "numpy_rng": np.random.get_state(), "python_rng": random.getstate()}
        self.ctx.checkpoint(state, remaining=remaining)

    def epoch_end(self, epoch: int, *, epochs: int | None = None) -> bool:
        """A safe point: under memory pressure, run the trial's ``on_pressure`` callbacks and
        checkpoint (``epochs``, the loop's total, tells the last epoch apart: no worker is ended
        there). Returns whether it checkpointed (when the worker goes on).

        Args:
            epoch: the epoch that just ended.
            epochs: the loop's number of epochs, when known.

        Returns:
            True when it checkpointed.
        """
        if not self.ctx.safe_point():
            return False
        self.save(epoch, remaining=None if epochs is None else max(epochs - epoch - 1, 0))
        return True
