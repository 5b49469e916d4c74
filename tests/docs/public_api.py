"""The public API the reference documents, and what each callable's docstring must say.

One list of public modules (:data:`PUBLIC_MODULES`) feeds both the reference pages' check and the
docstring check: a name is public when it is in its module's ``__all__``. A callable's docstring must
have, in Google style (parsed with griffe, as mkdocstrings does):

- ``Args:`` naming every parameter it takes (``self``/``cls`` aside; ``*args``/``**kwargs`` may be
  described in prose of the section instead of by name),
- ``Returns:`` (or ``Yields:``) when it is annotated to return something other than ``None``,
- ``Raises:`` when its own body raises.

A class is checked through its constructor (``__init__``'s parameters may be documented in the class
docstring or in ``__init__``'s), and its public methods the same way as functions, except a method
that overrides one of a base class (a Keras callback's ``on_epoch_end``), which its base documents.
One ``Args:`` line may name several parameters (``store, name: ...``).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

PUBLIC_MODULES = (
    "trainguard",
    "trainguard.exceptions",
    "trainguard.units",
    "trainguard.scope",
    "trainguard.runner",
    "trainguard.frameworks",
    "trainguard.keras",
    "trainguard.transformers",
    "trainguard.lightning",
    "trainguard.torch",
    "trainguard.optuna",
    "trainguard.joblib",
    "trainguard.keras_tuner",
    "trainguard.mlflow",
)


@dataclass
class Finding:
    name: str
    missing: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.name}: {'; '.join(self.missing)}"


def public_objects() -> Iterator[tuple[str, Any]]:
    """(qualified name, object) for every public name of every public module, each object once."""
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{module_name}.{name}", obj


def _sections(doc: str) -> dict[str, Any]:
    from griffe import Docstring, DocstringSectionKind

    parsed = Docstring(inspect.cleandoc(doc)).parse("google", warnings=False)
    out: dict[str, Any] = {}
    for section in parsed:
        kind = section.kind
        if kind in (DocstringSectionKind.parameters, DocstringSectionKind.other_parameters):
            # a line may document several parameters together ("store, name: ...", "minimum / maximum: ...")
            for p in section.value:
                out.setdefault("args", set()).update(
                    n.strip().lstrip("*")
                    for n in re.split(r"[,/]", p.name)
                    if n.strip() and n.strip() != "..."
                )
        elif kind in (DocstringSectionKind.returns, DocstringSectionKind.yields):
            out["returns"] = True
        elif kind == DocstringSectionKind.raises:
            out["raises"] = True
    return out


def _raises_in_body(fn: Any) -> bool:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return False
    tree = ast.parse(source)
    top = tree.body[0]

    def walk(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue  # a nested function's raises are its own
            yield child
            yield from walk(child)

    def contract(node: ast.Raise) -> bool:
        # a bare re-raise passes on what it caught; an AssertionError marks code that cannot be reached
        exc = node.exc
        if exc is None:
            return False
        name = exc.func if isinstance(exc, ast.Call) else exc
        return not (isinstance(name, ast.Name) and name.id == "AssertionError")

    return any(isinstance(n, ast.Raise) and contract(n) for n in walk(top))


def _returns_something(fn: Any) -> bool:
    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return False
    if annotation is inspect.Signature.empty:
        return False
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return text not in ("None", "NoReturn", "Never", "NoneType")


def check_callable(name: str, fn: Any, doc: str | None | list[str], *, skip_first: bool = False) -> list[str]:
    """What ``fn``'s docstring ``doc`` lacks (empty when complete); a list of docstrings (a class's and
    its ``__init__``'s) is read as one."""
    docs = [d for d in (doc if isinstance(doc, list) else [doc]) if d and d.strip()]
    if not docs:
        return ["no docstring"]
    sections: dict[str, Any] = {}
    for text in docs:
        for key, value in _sections(text).items():
            if key == "args":
                sections.setdefault("args", set()).update(value)
            else:
                sections[key] = value
    missing: list[str] = []
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if skip_first and params:
        params = params[1:]
    documented = sections.get("args", set())
    undocumented = [
        p.name
        for p in params
        if p.name not in documented
        and not (p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and documented)
        and not p.name.startswith("_")
    ]
    if undocumented:
        missing.append("Args: " + ", ".join(undocumented))
    if _returns_something(fn) and not sections.get("returns"):
        missing.append("Returns")
    if _raises_in_body(fn) and not sections.get("raises"):
        missing.append("Raises")
    return missing


def _overrides(cls: type, attr: str) -> bool:
    """A method that overrides its base class's (a Keras callback's hook): the base documents it."""
    return any(attr in vars(base) for base in cls.__mro__[1:] if base is not object)


def _public_methods(cls: type) -> Iterator[tuple[str, Any]]:
    for attr, value in vars(cls).items():
        if attr.startswith("_") or _overrides(cls, attr):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            yield attr, value.__func__
        elif inspect.isfunction(value):
            yield attr, value


def findings() -> list[Finding]:
    """Every public callable whose docstring lacks a section it needs."""
    out: list[Finding] = []
    for name, obj in public_objects():
        if inspect.isclass(obj):
            if issubclass(obj, (BaseException, enum.Enum)):
                continue  # exceptions and enums: their class docstring says what they carry
            init = obj.__dict__.get("__init__")
            if dataclasses.is_dataclass(obj) or init is None:
                init_doc_target = obj
            else:
                init_doc_target = init
            doc = [obj.__doc__ or "", getattr(init, "__doc__", None) or ""]
            if init is not None and not dataclasses.is_dataclass(obj):
                missing = check_callable(name, init_doc_target, doc, skip_first=True)
                if missing:
                    out.append(Finding(f"{name}()", missing))
            elif not (obj.__doc__ or "").strip():
                out.append(Finding(name, ["no docstring"]))
            for attr, method in _public_methods(obj):
                missing = check_callable(f"{name}.{attr}", method, method.__doc__, skip_first=True)
                if missing:
                    out.append(Finding(f"{name}.{attr}", missing))
        elif callable(obj):
            missing = check_callable(name, obj, obj.__doc__)
            if missing:
                out.append(Finding(name, missing))
    return out


if __name__ == "__main__":
    for finding in findings():
        print(finding)
