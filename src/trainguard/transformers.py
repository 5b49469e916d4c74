"""Hugging Face ``Trainer`` integration: memory in its logs, and searches whose trials train in
guarded workers.

::

    import trainguard.transformers

    memory = trainguard.transformers.MemoryCallback(limit="6GB", action="stop")
    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[memory])

    best = trainguard.transformers.hyperparameter_search(
        make_trainer,                     # params -> Trainer, called in the worker
        lambda trial: {"learning_rate": trial.suggest_float("learning_rate", 1e-5, 1e-3, log=True)},
        n_trials=10,
        guard={"memory_limit": "8GB"},
    )

Importing this module does not import transformers (nor torch); ``MemoryCallback`` does on first
use, and ``hyperparameter_search`` never does in the caller. A missing transformers raises
``MissingDependencyError`` naming ``pip install -e '.[transformers]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainguard.integrations.transformers_search import (
    BestRun,
    TrainerObjective,
    TrainerTrial,
    hyperparameter_search,
)

__all__ = ["MemoryCallback", "BestRun", "TrainerObjective", "TrainerTrial", "hyperparameter_search"]


def __getattr__(name: str) -> Any:
    if name == "MemoryCallback":
        from trainguard.exceptions import missing

        try:
            from trainguard.integrations.transformers_callback import MemoryCallback
        except ImportError as err:
            raise missing(
                "transformers", "trainguard.transformers.MemoryCallback", extra="transformers"
            ) from err
        globals()["MemoryCallback"] = MemoryCallback
        return MemoryCallback
    raise AttributeError(f"module 'trainguard.transformers' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from trainguard.integrations.transformers_callback import MemoryCallback  # noqa: F401
