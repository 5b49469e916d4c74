"""An isolated objective's exception, rebuilt in the supervisor as the type Optuna's ``catch=``
tests: in-process, ``catch=(MyError,)`` catches a user-defined ``MyError``; across the process
boundary only the names of its classes come back, so the class is found again by name.

The order: a builtin type; the exact class from a module the supervisor has imported already (the
objective's own module, sent by reference, is); else a class of ``catch`` that one of the recorded
classes names (same qualified name, or the same class name in a module of the same last name: a
file ref is imported under another module name in the worker). Nothing is imported here.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence

__all__ = ["exception_class", "instantiate"]


def _lookup(qualified: str) -> type[BaseException] | None:
    module, _, qualname = qualified.rpartition(".")
    if module == "builtins":
        found: object = getattr(builtins, qualname, None)
    else:
        # the class's module name is everything before its qualified name, which may be nested
        found = None
        parts = qualified.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            mod = sys.modules.get(".".join(parts[:cut]))
            if mod is None:
                continue
            found = mod
            for attr in parts[cut:]:
                found = getattr(found, attr, None)
            break
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    return None


def _same_name(qualified: str, cls: type[BaseException]) -> bool:
    if qualified == f"{cls.__module__}.{cls.__qualname__}":
        return True
    module, _, qualname = qualified.rpartition(".")
    return qualname == cls.__qualname__ and module.rpartition(".")[2] == cls.__module__.rpartition(".")[2]


def exception_class(
    qualified: str, mro: Sequence[str], catch: Sequence[type[BaseException]]
) -> type[BaseException] | None:
    """The class to raise for an exception recorded as ``qualified`` with classes ``mro``."""
    found = _lookup(qualified)
    if found is not None:
        return found
    for name in mro:
        for cls in catch:
            if _same_name(name, cls):
                return cls
    return None


def instantiate(cls: type[BaseException], message: str) -> Exception | None:
    """``cls(message)``, or for a class whose ``__init__`` takes other arguments an instance made
    without calling it (its message set as ``Exception`` sets it)."""
    try:
        made = cls(message)
    except Exception:  # noqa: BLE001 - an exception type with another signature
        try:
            made = cls.__new__(cls)
            Exception.__init__(made, message)
        except Exception:  # noqa: BLE001
            return None
    return made if isinstance(made, Exception) else None
