"""The adapter contract shared by every framework adapter.

An adapter answers questions about one framework *without importing it* unless the caller asks
for that explicitly: whether it is installed (``importlib.metadata``), whether it is already
imported (``sys.modules``), whether an exception is its out-of-memory error (by class name and
message, never by importing), and, only when it is loaded, its allocator statistics.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

__all__ = ["AllocatorStats", "BaseAdapter", "exception_chain"]


@dataclass(frozen=True, slots=True)
class AllocatorStats:
    """What one framework's allocator reports for one device.

    ``allocated_bytes`` is memory in live tensors, ``reserved_bytes`` what the caching allocator
    holds from the driver (>= allocated), ``peak_bytes`` the high-water mark of allocated, and
    ``limit_bytes`` the most it may take. Any of them is None where the framework does not say.
    ``raw`` holds the framework's own numbers, flattened to ``{name: number}``.
    """

    framework: str
    device: str
    allocated_bytes: int | None
    reserved_bytes: int | None = None
    peak_bytes: int | None = None
    limit_bytes: int | None = None
    raw: dict[str, float] = field(default_factory=dict)


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes/contexts, outermost first, without cycles."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def _type_names(exc: BaseException) -> list[tuple[str, str]]:
    out = []
    for cls in type(exc).__mro__:
        module = cls.__dict__.get("__module__", "")
        out.append((module if isinstance(module, str) else "", cls.__name__))
    return out


class BaseAdapter:
    """One framework. Subclasses set ``name``, ``module`` and ``distributions`` and override
    :meth:`_matches_oom` and :meth:`allocator_stats`.

    Contract: no method imports the framework except :meth:`import_module`; the others read
    ``sys.modules`` and return "unknown" (None / empty) when the framework is not loaded.
    """

    name: str = ""
    module: str = ""
    #: PyPI distributions that provide the module, most common first.
    distributions: tuple[str, ...] = ()

    def loaded(self) -> bool:
        """True if the framework is already imported in this process.

        Returns:
            Whether it is in ``sys.modules``.
        """
        return self.module in sys.modules

    def loaded_module(self) -> ModuleType | None:
        """The framework's module when it is already imported, else None (nothing is imported).

        Returns:
            The module, or None.
        """
        return sys.modules.get(self.module)

    def import_module(self) -> ModuleType:
        """Import the framework (the one method allowed to).

        Returns:
            The framework's module.
        """
        import importlib

        return importlib.import_module(self.module)

    def version(self) -> str | None:
        """The installed version, read from package metadata (or the loaded module); None if absent.

        Returns:
            The version string, or None.
        """
        mod = self.loaded_module()
        version = getattr(mod, "__version__", None) if mod is not None else None
        if isinstance(version, str):
            return version
        import importlib.metadata  # here: a worker's start does not pay for it (about 18 ms)

        for dist in self.distributions:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def available(self) -> bool:
        """True if the framework is installed (without importing it).

        Returns:
            Whether its package is installed.
        """
        if self.loaded():
            return True
        return self.version() is not None

    def is_oom(self, exc: BaseException) -> bool:
        """True if ``exc`` (or its cause/context) is this framework's out-of-memory error.

        Args:
            exc: the exception to classify.

        Returns:
            Whether it is this framework's out-of-memory error.
        """
        return any(self._matches_oom(e) for e in exception_chain(exc))

    def _matches_oom(self, exc: BaseException) -> bool:  # pragma: no cover - overridden
        return False

    def allocator_stats(self, *, import_framework: bool = False) -> list[AllocatorStats]:
        """Per-device allocator statistics; [] when the framework is not loaded (and not asked to
        import) or reports nothing for the devices present.

        Args:
            import_framework: import the framework when it is not imported yet.

        Returns:
            One entry per device.
        """
        return []

    @staticmethod
    def _raised_as(exc: BaseException, classes: tuple[str, ...], modules: tuple[str, ...]) -> bool:
        """Whether ``exc``'s class or one of its bases is named one of ``classes`` and defined in a
        module whose name starts with one of ``modules`` (by name: the framework is not imported)."""
        return any(name in classes and module.startswith(modules) for module, name in _type_names(exc))

    def _module_for_stats(self, import_framework: bool) -> Any:
        mod = self.loaded_module()
        if mod is None and import_framework and self.available():
            mod = self.import_module()
        return mod
