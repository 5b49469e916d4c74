"""Optional dependencies, imported only where a feature needs them: a public module's attribute
imported on first use where its framework is installed (``trainguard.keras.MemoryCallback``,
``trainguard.torch.Checkpointer``: importing ``trainguard.keras`` imports no framework), and a
package imported for a feature or ``MissingDependencyError`` naming the extra to install."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["lazy_attribute", "import_optional"]


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


def import_optional(module: str, package: str, feature: str, extra: str) -> ModuleType:
    """``module`` imported for ``feature``, or ``MissingDependencyError`` saying to install
    ``package`` (the ``extra`` of trainguard that brings it)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        from trainguard.exceptions import missing

        raise missing(package, feature, extra=extra) from err
