"""Who holds it: a short chain of references from something the user recognises to a live object.

objgraph's back-reference chains walk ``gc.get_referrers`` from the object up. That misses most
of what matters here: ``gc.get_referrers`` searches only GC-tracked objects outside the frozen
generation, and the leak check freezes everything alive before the first call (module globals
among them), while CPython does not track a dict that holds only arrays or numbers (a typical
``_cache = {}``). So the search runs the other way: breadth first from named roots down through
``gc.get_referents``, which sees frozen and untracked containers alike, until it meets an object
of the kind asked for. Roots, in the order searched (the first, shortest chain wins):

1. globals of the user's own modules (files outside the standard library and site-packages):
   ``global RESULTS in train.py``;
2. local variables of every running frame: ``local history in fit() (train.py:12)``;
3. framework registries: Keras' global state, TensorFlow's gradient registry (where
   ``tf.custom_gradient`` pins each traced graph that used it), graph and function caches;
4. globals of every other module: ``global _cache of module somelib.util``.

Each hop says how the next object is reached: ``[3]`` (an item), ``['key']`` (a dict entry),
``.name`` (an attribute of an object of a named class), ``(closure)`` or ``(referent)``. The walk
does not enter classes, modules or a function's globals (they would spread into the whole heap)
and stops after ``max_nodes`` objects.
"""

from __future__ import annotations

import gc
import sys
import sysconfig
import time
import types
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["is_user_file", "holder_chains", "kind_predicate"]

_SKIP_PATHS = tuple(
    p for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} if p
)
_PACKAGE_DIR = __file__.rsplit("/", 2)[0]
_NO_DESCEND = (type, types.ModuleType, types.CodeType, types.FrameType, types.BuiltinFunctionType)


def is_user_file(path: str) -> bool:
    """A file of the user's own code: not the standard library, site-packages or trainguard."""
    if not path or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path or path.startswith(_PACKAGE_DIR):
        return False
    return not path.startswith(_SKIP_PATHS)


def kind_predicate(kind: str) -> Callable[[Any], bool] | None:
    """A test for objects of a census kind (``numpy.ndarray``, ``tensorflow.Operation``,
    ``torch Tensor float32[32, 10] cpu``, ``python.pkg.Class``); None when there is none."""
    if kind.startswith("numpy"):
        ndarray = getattr(sys.modules.get("numpy"), "ndarray", None)
        return None if ndarray is None else _detailed(ndarray, kind)
    if kind.startswith("torch"):
        tensor = getattr(sys.modules.get("torch"), "Tensor", None)
        if kind == "torch.Tensor with grad_fn" and tensor is not None:
            return lambda o: isinstance(o, tensor) and o.grad_fn is not None
        if kind.startswith(("torch.Tensor", "torch Tensor")) and tensor is not None:
            return _detailed(tensor, kind)
    if kind.startswith(("tensorflow.", "keras.")) and "traces" not in kind:
        framework, name = kind.split(".", 1)
        return lambda o: type(o).__name__ == name and type(o).__module__.startswith(framework)
    if kind.startswith("python."):
        name = kind.removeprefix("python.")
        return lambda o: _type_name(type(o)) == name
    return None


def _type_name(t: type) -> str:
    module = getattr(t, "__module__", "")
    return t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"


def _detailed(base: type[Any], kind: str) -> Callable[[Any], bool]:
    # "numpy ndarray float64[200, 64] cpu": match dtype and shape too
    if "[" not in kind:
        return lambda o: isinstance(o, base)
    first = kind.index(" ", kind.index(" ") + 1) + 1
    spec = kind[first : kind.rindex("]") + 1]
    return lambda o: (
        isinstance(o, base)
        and f"{str(o.dtype).removeprefix('torch.')}[{', '.join(map(str, o.shape))}]" == spec
    )


def _root_groups() -> Iterator[list[tuple[str, Any]]]:
    """(label, object) roots in groups searched one after the other: the user's globals, running
    frames' locals, framework registries, other modules' globals (each built only when reached)."""
    modules = [(n, m) for n, m in list(sys.modules.items()) if isinstance(getattr(m, "__dict__", None), dict)]
    user_names = {n for n, m in modules if is_user_file(getattr(m, "__file__", None) or "")}
    user = []
    for mod_name in user_names:
        module = sys.modules[mod_name]
        where = (getattr(module, "__file__", "") or "").rsplit("/", 1)[-1]
        for name, value in list(vars(module).items()):
            if not name.startswith("__"):
                user.append((f"global {name} in {where}", value))
    yield user
    yield list(_frame_locals())
    yield list(_registries())
    yield [
        (f"global {name} of module {mod_name}", value)
        for mod_name, module in modules
        if mod_name not in user_names
        for name, value in list(vars(module).items())
        if not name.startswith("__") and not isinstance(value, _NO_DESCEND)
    ]


def _frame_locals() -> Iterator[tuple[str, Any]]:
    for top in list(sys._current_frames().values()):
        frame: types.FrameType | None = top
        while frame is not None:
            code = frame.f_code
            if is_user_file(code.co_filename):
                where = f"{code.co_name}() ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"
                for name, value in list(frame.f_locals.items()):
                    yield f"local {name} in {where}", value
            frame = frame.f_back


def _registries() -> Iterator[tuple[str, Any]]:
    state = sys.modules.get("keras.src.backend.common.global_state")
    if state is not None and hasattr(state, "GLOBAL_STATE_TRACKER"):
        yield "Keras global state (keras.src.backend.common.global_state)", state.GLOBAL_STATE_TRACKER
    ops = sys.modules.get("tensorflow.python.framework.ops")
    if ops is not None and hasattr(ops, "_gradient_registry"):
        # tf.custom_gradient registers a gradient per trace here, closing over the traced graph
        yield "TensorFlow's gradient registry (ops._gradient_registry)", ops._gradient_registry
    if ops is not None and hasattr(ops, "get_default_graph"):
        try:
            yield "TensorFlow's default graph", ops.get_default_graph()
        except Exception:  # no graph in this thread
            pass
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is not None and hasattr(context, "context"):
        try:
            yield "TensorFlow's eager context (function registry)", context.context()
        except Exception:
            pass


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    """(edge label, child) for what ``obj`` refers to."""
    t = type(obj)
    if t is dict or isinstance(obj, dict):
        for key, value in list(obj.items()):
            yield f"[{key!r}]"[:60], value
    elif isinstance(obj, (list, tuple, deque)):
        for i, value in enumerate(list(obj)):
            yield f"[{i}]", value
    elif isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            try:
                yield f"(closure of {obj.__qualname__})", cell.cell_contents
            except ValueError:
                continue
    elif isinstance(obj, types.CellType):
        return
    else:
        namespace = getattr(obj, "__dict__", None) if not isinstance(obj, _NO_DESCEND) else None
        seen = id(namespace) if isinstance(namespace, dict) else None
        if isinstance(namespace, dict):
            for key, value in list(namespace.items()):
                yield f".{key} of {t.__name__}", value
        for value in gc.get_referents(obj):
            if id(value) != seen and not isinstance(value, _NO_DESCEND):
                yield f"(held by {t.__name__})", value


def holder_chains(
    predicates: dict[str, Callable[[Any], bool]],
    *,
    accept: Callable[[Any], bool] | None = None,
    max_nodes: int = 300_000,
    max_seconds: float = 3.0,
) -> dict[str, str]:
    """The shortest chain from a named root to an object satisfying each predicate.

    Args:
        predicates: ``{kind: test}``; each kind gets the first object found that passes its test.
        accept: a further test every match must pass (e.g. "created during the iterations").
        max_nodes: objects visited at most.
        max_seconds: wall time at most.

    Returns:
        ``{kind: "global RESULTS in train.py -> [311] (ndarray)"}`` for the kinds found.
    """
    found: dict[str, str] = {}
    pending = dict(predicates)
    parents: dict[int, tuple[int | None, str, Any]] = {}
    deadline = time.perf_counter() + max_seconds
    # the walk reads attributes of every module (torch.distributed.reduce_op and the like warn
    # that they are deprecated when touched): the user did not touch them, so they are not told
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for group in _root_groups():
            queue: deque[int] = deque()
            for label, value in group:
                if id(value) not in parents and not isinstance(value, _NO_DESCEND):
                    parents[id(value)] = (None, label, value)
                    queue.append(id(value))
            _walk(queue, parents, pending, found, accept, max_nodes, deadline)
            if not pending:
                break
    return found


def _walk(
    queue: deque[int],
    parents: dict[int, tuple[int | None, str, Any]],
    pending: dict[str, Callable[[Any], bool]],
    found: dict[str, str],
    accept: Callable[[Any], bool] | None,
    max_nodes: int,
    deadline: float,
) -> None:
    """Breadth first from the queued roots, recording the first match of each pending kind."""
    while queue and pending and len(parents) < max_nodes and time.perf_counter() < deadline:
        oid = queue.popleft()
        obj = parents[oid][2]

        for kind, test in list(pending.items()):
            if _matches(test, obj) and (accept is None or accept(obj)):
                found[kind] = _render(parents, oid)
                del pending[kind]
        try:
            children = list(_children(obj))
        except Exception:  # exotic objects may refuse introspection
            continue
        for edge, child in children:
            if id(child) not in parents and not isinstance(child, _NO_DESCEND):
                parents[id(child)] = (oid, edge, child)
                queue.append(id(child))


def _matches(test: Callable[[Any], bool], obj: Any) -> bool:
    try:
        return bool(test(obj))
    except Exception:
        return False


def _render(parents: dict[int, tuple[int | None, str, Any]], oid: int) -> str:
    hops: list[str] = []
    cur: int | None = oid
    while cur is not None:
        parent, edge, obj = parents[cur]
        size = f", {len(obj)} entries" if isinstance(obj, (list, dict, set, deque)) else ""
        name = type(obj).__name__
        if name == "Function" and type(obj).__module__.startswith("tensorflow"):
            name = "tf.function, whose trace cache keeps every traced graph"
        hops.append(f"{edge} ({name}{size})")
        cur = parent
    hops.reverse()
    if len(hops) > 6:
        hops = hops[:3] + [f"... {len(hops) - 5} more ..."] + hops[-2:]
    return " -> ".join(hops)
