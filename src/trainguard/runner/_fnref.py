"""Resolve what the user wants to run into something a fresh worker process can load.

Three forms, checked in the supervisor without importing the user's code (which may import a
framework the supervisor should not pay for):

- ``"package.module:function"``: imported by reference in the worker.
- ``"path/to/file.py:function"``: the file is loaded as a module in the worker (its folder goes on
  ``sys.path`` so sibling imports work; an ``if __name__ == "__main__":`` block does not run).
- a Python callable: by reference when its module can be imported by name (cheap, robust), else by
  value with cloudpickle (functions from ``__main__``, notebooks, closures, lambdas).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainguard._loadfile import import_file
from trainguard.exceptions import ConfigError

__all__ = ["FnSpec", "prepare", "load", "split_ref"]


@dataclass(frozen=True, slots=True)
class FnSpec:
    """A trial function ready to ship to a worker.

    ``ref`` is what the store and the default run name use; ``kind`` says how ``payload`` is read:
    ``"module"`` ("pkg.mod:fn"), ``"file"`` (absolute "path.py:fn"), ``"pickle"`` (cloudpickle bytes),
    ``"node"`` (absolute "path.js:fn", run by a Node worker), ``"command"`` (a :class:`Command` as JSON).
    ``version`` is a hash of the code (see :func:`code_version`), stored with the run so that a
    resume can tell when the function changed since its results were computed; None if unknown.
    """

    ref: str
    kind: Literal["module", "file", "pickle", "node", "command"]
    payload: str | bytes
    version: str | None = None


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _source_version(source: str) -> str:
    """The hash of a module's syntax tree: code changes count, comments and blank lines do not."""
    try:
        return _hash(ast.dump(ast.parse(source)))
    except (SyntaxError, ValueError):
        return _hash(source)


def _file_version(path: str | os.PathLike[str] | None) -> str | None:
    if not path or not str(path).endswith(".py"):
        return None
    try:
        return _source_version(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def code_version(fn: Callable[..., Any]) -> str | None:
    """A hash of a callable's code: the whole module file when it has one (helpers it calls count),
    else its own source, else its bytecode and constants; None when none can be read."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    if module is not None and getattr(module, "__name__", "") not in ("__main__", "__mp_main__"):
        version = _file_version(getattr(module, "__file__", None))
        if version is not None:
            return version
    try:
        import inspect
        import textwrap

        return _source_version(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError):
        pass
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return _hash(repr((code.co_code, code.co_consts, code.co_names)))


def split_ref(ref: str) -> tuple[str, str]:
    """Split ``"target:function"``; the function may be a dotted attribute path (``Class.method``)."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ConfigError(
            f"fn {ref!r} is not a reference: use 'package.module:function' or 'path/file.py:function'"
        )
    return target, attr


def _is_file_target(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            # definitions under a top-level if/try (e.g. optional imports) count too
            body = [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
            names |= _top_level_names(ast.Module(body=body, type_ignores=[]))
    return names


def _prepare_file(target: str, attr: str) -> FnSpec:
    path = Path(target).expanduser()
    if path.suffix != ".py":
        raise ConfigError(f"fn file {target!r} must be a .py file, as in 'train.py:fit'")
    if not path.is_file():
        raise ConfigError(f"fn file {target!r} does not exist (looked in {Path.cwd()})")
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as err:
        raise ConfigError(f"fn file {target!r} does not parse: line {err.lineno}: {err.msg}") from err
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"fn file {target!r} cannot be read: {err}") from err
    head = attr.split(".")[0]
    names = _top_level_names(tree)
    if head not in names:
        defs = sorted(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        hint = f" (functions there: {', '.join(defs)})" if defs else ""
        raise ConfigError(f"fn file {target!r} defines no top-level {head!r}{hint}")
    resolved = path.resolve()
    return FnSpec(f"{resolved}:{attr}", "file", f"{resolved}:{attr}", _source_version(source))


def _prepare_node(ref: str) -> FnSpec:
    """``"train.js:train"``: checked here (the file, and Node.js), loaded by a Node worker."""
    from trainguard._node import find_node

    target, _, attr = ref.rpartition(":")
    if not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ConfigError(f"fn {ref!r} is not a reference: use 'path/file.js:function'")
    path = Path(target).expanduser()
    if not path.is_file():
        raise ConfigError(f"fn file {target!r} does not exist (looked in {Path.cwd()})")
    find_node()
    resolved = path.resolve()
    try:
        version = _hash(resolved.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        version = None
    return FnSpec(f"{resolved}:{attr}", "node", f"{resolved}:{attr}", version)


def _prepare_module(target: str, attr: str) -> FnSpec:
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError) as err:
        raise ConfigError(f"fn module {target!r} cannot be found: {err}") from err
    if spec is None:
        raise ConfigError(
            f"fn module {target!r} cannot be found: is it installed or on PYTHONPATH? "
            f"(for a file, write 'path/{target.rsplit('.', 1)[-1]}.py:{attr}')"
        )
    ref = f"{target}:{attr}"
    return FnSpec(ref, "module", ref, _file_version(spec.origin))


def _importable_by_reference(fn: Callable[..., Any]) -> str | None:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or module in ("__main__", "__mp_main__") or "<" in qualname:
        return None
    mod = sys.modules.get(module)
    if mod is None or getattr(mod, "__file__", None) is None and module not in sys.builtin_module_names:
        return None
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    # a module-level @trainguard.isolated leaves its wrapper under the name: the worker unwraps it
    found = obj is fn or getattr(obj, "__trainguard_wrapped__", None) is fn
    return f"{module}:{qualname}" if found else None


def prepare(fn: Callable[..., Any] | str) -> FnSpec:
    """Check ``fn`` and turn it into a :class:`FnSpec`, without importing user files.

    Raises:
        ConfigError: the reference is malformed, the module or file is missing, the file does not
            parse or lacks the function, or the callable cannot be pickled.

    Args:
        fn: a callable, ``"pkg.module:function"``, ``"path/file.py:function"`` or a ``.js`` file's function.

    Returns:
        The spec: its kind, payload and a hash of the function's code.
    """
    from trainguard.runner.worker.command import Command

    if isinstance(fn, Command):
        return FnSpec(fn.ref, "command", fn.payload(), fn.version())
    if isinstance(fn, (str, os.PathLike)):
        from trainguard._node import is_js_file

        target, _, _ = os.fspath(fn).rpartition(":")
        if is_js_file(target):
            return _prepare_node(os.fspath(fn))
        target, attr = split_ref(os.fspath(fn))
        return _prepare_file(target, attr) if _is_file_target(target) else _prepare_module(target, attr)
    if not callable(fn):
        raise ConfigError(
            f"fn must be a callable or a 'module:function' / 'file.py:function' string, not {type(fn).__name__}"
        )
    ref = _importable_by_reference(fn)
    if ref is not None:
        return FnSpec(ref, "module", ref, code_version(fn))
    import cloudpickle

    try:
        payload = cloudpickle.dumps(fn)
    except Exception as err:  # noqa: BLE001 - any pickling failure becomes one actionable line
        raise ConfigError(
            f"fn {getattr(fn, '__qualname__', fn)!r} cannot be pickled ({type(err).__name__}: {err}); "
            "define it at module top level or pass 'file.py:function'"
        ) from err
    module = getattr(fn, "__module__", None) or "__main__"
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return FnSpec(f"{module}:{name}", "pickle", payload, code_version(fn))


def _load_file(path: str, attr: str) -> Any:
    file = Path(path)
    name = file.stem if file.stem.isidentifier() and file.stem not in sys.modules else "__trainguard_trial__"
    return import_file(file, name)


def load(kind: str, payload: str | bytes) -> Callable[..., Any]:
    """Worker side: turn a :class:`FnSpec`'s ``kind`` and ``payload`` back into the callable.

    Args:
        kind: how the function travels (a reference, a file, cloudpickled bytes).
        payload: the reference or the bytes.

    Returns:
        The callable.

    Raises:
        TypeError: what the reference names is not callable.
    """
    if kind == "pickle":
        import pickle

        assert isinstance(payload, bytes)
        fn: Callable[..., Any] = pickle.loads(payload)
        return fn
    assert isinstance(payload, str)
    target, attr = split_ref(payload)
    obj: Any = _load_file(target, attr) if kind == "file" else importlib.import_module(target)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{payload} is a {type(obj).__name__}, not a function")
    loaded: Callable[..., Any] = obj
    return loaded
