"""Keras integration: ``trainguard.keras.MemoryCallback`` for ``fit`` (TensorFlow, torch and JAX backends).

::

    import trainguard.keras

    model.fit(x, y, epochs=50, callbacks=[trainguard.keras.MemoryCallback(limit="6GB", action="stop")])

Importing this module does not import Keras; the first use of ``MemoryCallback`` does (a missing
Keras raises ``MissingDependencyError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainguard._optional import lazy_attribute

__all__ = ["MemoryCallback"]


__getattr__ = lazy_attribute(
    __name__, "MemoryCallback", "trainguard.integrations.keras_callback", "keras", globals()
)


if TYPE_CHECKING:  # pragma: no cover
    from trainguard.integrations.keras_callback import MemoryCallback  # noqa: F401
