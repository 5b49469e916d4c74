"""Runs one notebook cell inside a guarded worker (worker side; imports nothing heavy).

The cell's source runs in a fresh namespace holding the names it reads, as the notebook had them
(unpickled by value); afterwards each name it assigned (or rebound) is pickled alone, so that one
that cannot come back (a live model holding a device, an open file) is named and the rest still
come back. When the kernel asks for the cell's value (its last statement is an expression, with no
trailing ``;``), that expression is evaluated apart, as IPython does, and comes back too.

A value whose unpickling would import a deep-learning framework (a Keras model, a torch tensor:
read from its pickle's global references, :mod:`._audit`) stays in the worker unless the cell
names it in ``out`` (``%%trainguard --out model``): bringing it back would load the framework into
the kernel, the growth the magic keeps out. An input the cell changed in place without assigning
it (``rows.append(1)``) changed only in the worker: it is named (found by a digest of its pickle
before and after), and comes back when named in ``out``.

The value returned is ``(values, not_returned, shown, notes)``: ``values`` name -> pickled bytes,
``not_returned`` name -> reason, ``shown`` the cell's value (None: nothing to show) as one of
``{"name": n}`` (the value is the name ``n`` that comes back: it is not sent twice),
``{"pickled": bytes}``, or ``{"repr": text, "why": reason}`` for a value that cannot be pickled;
``notes`` ``{"held": {name: framework}, "changed": [names]}``.
"""

from __future__ import annotations

import ast
import types
from typing import Any

from trainguard.guarded import describe
from trainguard.notebook._audit import framework_of

__all__ = ["run_cell", "MAX_REPR_CHARS"]

#: the most characters of a worker-side repr sent back for a value that cannot come back
MAX_REPR_CHARS = 100_000


def run_cell(
    source: str,
    filename: str,
    inputs_pickled: bytes,
    assigned: list[str],
    show_value: bool = False,
    out: tuple[str, ...] = (),
) -> tuple[dict[str, bytes], dict[str, str], dict[str, Any] | None, dict[str, Any]]:
    import linecache

    import cloudpickle

    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    inputs: dict[str, Any] = cloudpickle.loads(inputs_pickled)
    namespace.update(inputs)
    # tracebacks show the cell's lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sent = {name: id(value) for name, value in inputs.items()}
    before = {name: _digest(value) for name, value in inputs.items()}
    tree = ast.parse(source, filename)
    last = tree.body[-1] if show_value and tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    value = None
    try:
        exec(compile(tree, filename, "exec"), namespace)  # noqa: S102 - the user's own cell, in the user's own worker
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)  # noqa: S307
    except Exception as err:
        plain = without_framework(err)
        if plain is None:
            raise
        raise plain from err
    candidates = [n for n in assigned if n in namespace]
    candidates += [
        n
        for n, v in namespace.items()
        if not n.startswith("__") and n not in candidates and (n not in sent or sent[n] != id(v))
    ]
    changed = [
        n
        for n in sent
        if n not in candidates
        and n in namespace
        and before[n] is not None
        and _digest(namespace[n]) != before[n]
    ]
    candidates += [n for n in changed if n in out]
    values: dict[str, bytes] = {}
    not_returned: dict[str, str] = {}
    held: dict[str, str] = {}
    for name in candidates:
        reason = _pickle_into(values, name, namespace[name])
        if reason is not None:
            not_returned[name] = reason
        elif name not in out and (framework := framework_of(values[name])) is not None:
            del values[name]
            if not isinstance(namespace[name], types.ModuleType):  # `import torch`: said by itself
                held[name] = f"{describe(namespace[name])}, {framework}"
    shown = None if last is None or value is None else _shown(last.value, value, values)
    notes = {"held": held, "changed": [n for n in changed if n not in out]}
    return values, not_returned, shown, notes


def without_framework(err: Exception) -> Exception | None:
    """For an exception whose unpickling would import a framework (``torch.OutOfMemoryError``,
    TensorFlow's ``InvalidArgumentError``): the nearest built-in exception type, its message
    naming the original type, so that the cell fails the same way without loading the framework
    in the kernel. None for any other exception."""
    import builtins

    import cloudpickle

    try:
        framework = framework_of(cloudpickle.dumps(err))
    except Exception:  # noqa: BLE001 - an exception that cannot be pickled is rebuilt by name later
        return None
    if framework is None:
        return None
    base = next(
        (
            c
            for c in type(err).__mro__
            if c.__module__ == "builtins" and getattr(builtins, c.__name__, None) is c
        ),
        Exception,
    )
    qualified = f"{type(err).__module__}.{type(err).__qualname__}"
    try:
        return base(f"{qualified}: {err}")
    except Exception:  # noqa: BLE001 - a built-in base with another signature (UnicodeError's)
        return RuntimeError(f"{qualified}: {err}")


def _digest(value: Any) -> bytes | None:
    """A digest of ``value``'s pickle, streamed (no second copy of a large array); None if it
    cannot be pickled."""
    import hashlib

    import cloudpickle

    digest = hashlib.blake2b(digest_size=16)

    class _Sink:
        def write(self, data: Any) -> int:
            digest.update(data)
            return len(data)

    try:
        cloudpickle.CloudPickler(_Sink(), protocol=5).dump(value)
    except Exception:  # noqa: BLE001 - pickling anything can raise anything
        return None
    return digest.digest()


def _pickle_into(values: dict[str, bytes], name: str, value: Any) -> str | None:
    """Pickle ``value`` into ``values[name]``; the reason it cannot come back, if it cannot."""
    import cloudpickle

    try:
        values[name] = cloudpickle.dumps(value)
    except Exception as err:  # noqa: BLE001 - pickling anything can raise anything
        hint = (
            "save it to a file" if "model" in type(value).__name__.lower() else "save what you need from it"
        )
        return f"{describe(value)}; {hint} ({type(err).__name__}: {str(err)[:120]})"
    return None


def _shown(expr: ast.expr, value: Any, values: dict[str, bytes]) -> dict[str, Any]:
    """The cell's value as it travels: by the name it also comes back as, pickled, or its repr."""
    if isinstance(expr, ast.Name) and expr.id in values:
        return {"name": expr.id}  # `model_summary` as the last line: one copy, and `_ is model_summary`
    box: dict[str, bytes] = {}
    reason = _pickle_into(box, "value", value)
    if reason is None and (framework := framework_of(box["value"])) is not None:
        reason = f"{describe(value)}: bringing it back would import {framework} into the notebook"
    elif reason is None:
        return {"pickled": box["value"]}
    try:
        text = repr(value)
    except Exception as err:  # noqa: BLE001 - a repr that raises still leaves the cell's result
        text = f"<{type(value).__qualname__} object; its repr raised {type(err).__name__}: {err}>"
    if len(text) > MAX_REPR_CHARS:
        text = text[:MAX_REPR_CHARS] + f"... ({len(text) - MAX_REPR_CHARS} more characters)"
    return {"repr": text, "why": reason}
