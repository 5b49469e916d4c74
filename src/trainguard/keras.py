"""Keras integration: ``trainguard.keras.MemoryCallback`` for ``fit`` (TensorFlow, torch and JAX backends).

::

    import trainguard.keras

    model.fit(x, y, epochs=50, callbacks=[trainguard.keras.MemoryCallback(limit="6GB", action="stop")])

Importing this module does not import Keras; the first use of ``MemoryCallback`` does (a missing
Keras raises ``MissingDependencyError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["MemoryCallback"]


def __getattr__(name: str) -> Any:
    if name == "MemoryCallback":
        import importlib.util

        if importlib.util.find_spec("keras") is None:
            from trainguard.exceptions import missing

            raise missing("keras", "trainguard.keras.MemoryCallback")
        from trainguard.integrations.keras_callback import MemoryCallback

        globals()["MemoryCallback"] = MemoryCallback
        return MemoryCallback
    raise AttributeError(f"module 'trainguard.keras' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from trainguard.integrations.keras_callback import MemoryCallback  # noqa: F401
