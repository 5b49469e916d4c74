"""Which modules unpickling a value would import, read from its pickle without loading it (pure).

A ``%%trainguard`` cell's names come back to the kernel by value; a Keras 3 model or a torch
tensor pickles, and unpickling it imports its framework into the kernel (600+ MiB that the
kernel then keeps). The worker reads each pickle's global references (``GLOBAL``, ``INST``,
``STACK_GLOBAL``, and the modules cloudpickle re-imports with ``subimport``) with
:mod:`pickletools` before sending it, so the kernel never has to import anything to decide.
"""

from __future__ import annotations

import pickletools

__all__ = ["FRAMEWORKS", "imported_modules", "framework_of"]

#: top-level packages whose import a cell's value must not bring into the kernel by default
FRAMEWORKS = frozenset(
    {"tensorflow", "keras", "tf_keras", "torch", "torchvision", "torchaudio", "jax", "jaxlib", "flax"}
)

_STRINGS = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}
)
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_SUBIMPORTS = frozenset({"subimport", "dynamic_subimport"})


def imported_modules(data: bytes) -> set[str]:
    """The modules unpickling ``data`` would import (their full dotted names)."""
    modules: set[str] = set()
    pushed: list[str | None] = []  # the values pushed so far (a string, or None for anything else)
    memo: dict[int, str | None] = {}
    subimport_pending = False
    for opcode, arg, _ in pickletools.genops(data):
        name = opcode.name
        if name in ("FRAME", "PROTO", "STOP"):
            continue
        if name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
            continue
        if name in _PUTS:
            memo[int(arg or 0)] = pushed[-1] if pushed else None
            continue
        value: str | None = None
        if name in _STRINGS:
            value = arg.decode("latin-1") if isinstance(arg, bytes) else str(arg)
        elif name in _GETS:
            value = memo.get(int(arg or 0))
        elif name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            subimport_pending = _found(modules, module, attr) or subimport_pending
        elif name == "STACK_GLOBAL" and len(pushed) >= 2:
            pushed_module, pushed_attr = pushed[-2], pushed[-1]
            if pushed_module is not None and pushed_attr is not None:
                found = _found(modules, pushed_module, pushed_attr)
                subimport_pending = found or subimport_pending
        if subimport_pending and value is not None:
            modules.add(value)  # the name cloudpickle's subimport is called with
            subimport_pending = False
        pushed.append(value)
    return modules


def _found(modules: set[str], module: str, attr: str) -> bool:
    """Record ``module``; whether the global is cloudpickle's re-import of a module by name."""
    modules.add(module)
    return module.startswith("cloudpickle") and attr in _SUBIMPORTS


def framework_of(data: bytes) -> str | None:
    """The framework (``"tensorflow"``, ``"torch"``...) unpickling ``data`` would import, or None."""
    for module in sorted(imported_modules(data)):
        top = module.split(".")[0]
        if top in FRAMEWORKS:
            return top
    return None
