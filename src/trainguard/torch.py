"""PyTorch integration: ``trainguard.torch.Checkpointer`` for a plain training loop in a staged trial.

::

    import trainguard.torch

    def train(params, ctx):
        model, optimizer = build()
        saver = trainguard.torch.Checkpointer(ctx, model, optimizer)
        for epoch in range(saver.restore(), params["epochs"]):   # 0, or the epoch it resumes from
            train_one_epoch(model, optimizer)
            saver.epoch_end(epoch, epochs=params["epochs"])        # under memory pressure: checkpoint

Importing this module does not import torch; the first use of ``Checkpointer`` does (a missing
torch raises ``MissingDependencyError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainguard._optional import lazy_attribute

__all__ = ["Checkpointer"]


__getattr__ = lazy_attribute(
    __name__, "Checkpointer", "trainguard.integrations.torch_checkpoint", "torch", globals()
)


if TYPE_CHECKING:  # pragma: no cover
    from trainguard.integrations.torch_checkpoint import Checkpointer  # noqa: F401
