"""A public module's attribute imported on first use, where its framework is installed: what
``trainguard.keras.MemoryCallback`` and ``trainguard.torch.Checkpointer`` do, so that importing
``trainguard.keras`` or ``trainguard.torch`` imports no framework."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_attribute"]


def lazy_attribute(
    module: str, name: str, source: str, framework: str, namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that gives ``name`` from ``source`` on first use and keeps it in
    ``namespace`` (the module's globals), or raises ``MissingDependencyError`` naming
    ``framework`` when that is not installed; any other name raises ``AttributeError``."""

    def __getattr__(attribute: str) -> Any:
        if attribute != name:
            raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
        if importlib.util.find_spec(framework) is None:
            from trainguard.exceptions import missing

            raise missing(framework, f"{module}.{name}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
