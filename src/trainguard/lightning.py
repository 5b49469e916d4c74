"""PyTorch Lightning integration: ``trainguard.lightning.MemoryCallback`` for ``Trainer.fit``.

::

    import lightning as L
    import trainguard.lightning

    trainer = L.Trainer(max_epochs=50, callbacks=[trainguard.lightning.MemoryCallback(limit="6GB", action="stop")])

Importing this module does not import Lightning (nor torch); the first use of ``MemoryCallback``
does. A missing Lightning raises ``MissingDependencyError`` naming ``pip install -e '.[lightning]'``.
The callback is a ``lightning.pytorch`` callback (the ``lightning`` package), the one its
``Trainer`` accepts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["MemoryCallback"]


def __getattr__(name: str) -> Any:
    if name == "MemoryCallback":
        from trainguard.exceptions import missing

        try:
            from trainguard.integrations.lightning_callback import MemoryCallback
        except ImportError as err:
            raise missing("lightning", "trainguard.lightning.MemoryCallback", extra="lightning") from err
        globals()["MemoryCallback"] = MemoryCallback
        return MemoryCallback
    raise AttributeError(f"module 'trainguard.lightning' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from trainguard.integrations.lightning_callback import MemoryCallback  # noqa: F401
