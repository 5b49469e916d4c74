"""Release the traced graphs that ``tf.custom_gradient`` pins in TensorFlow's gradient registry.

Why Keras ``fit`` in a loop grows on TensorFlow even after ``clear_session()`` and ``gc.collect()``:
a ``@tf.custom_gradient`` function called while a ``tf.function`` is being traced (graph mode)
registers its gradient under a fresh name, ``CustomGradient-<uid>``, in the process-wide
``tensorflow.python.framework.ops._gradient_registry``, and nothing ever removes it. The
registered function closes over the traced output tensors, so the entry keeps the whole traced
``FuncGraph`` alive: every ``Operation`` and ``SymbolicTensor`` in it, and the C++ graph behind it.
Keras 3 hits this in every ``fit``: its TensorFlow optimizer sums gradients with
``tf.distribute.get_replica_context().all_reduce(...)``, which wraps the values in a
``custom_gradient``, inside the traced train step (``one_step_on_data``). The chain, as
``gc.get_referrers`` walks it up from a surviving ``Operation``::

    ops._gradient_registry (a Registry, module global of tensorflow.python.framework.ops)
      ._registry['CustomGradient-413']['type']  -> internal_grad_fn
      (closure) tape_grad_fn -> (closure) result: [SymbolicTensor, ...] -> .graph: FuncGraph
      -> its ~700 Operations (two traces a fit with a partial last batch, ~1,000 with the demo's model)

:func:`release_custom_gradients` moves each such gradient function out of the registry and onto
the graph it belongs to, and leaves in the registry a small proxy that finds it there through a
weak reference. While the graph lives, its gradient is looked up and computed exactly as before
(the proxy calls the same function); once nothing else holds the graph, the garbage collector
frees it with its gradient function, and the next call removes the dead proxy, so a lookup of
that name then fails as for any unregistered op type. No op of that type can exist outside its
graph: the name is unique and the gradient function only works with that graph's own tensors.
Replacing a registry entry is a single dict assignment, so a concurrent gradient lookup sees
either the original function or its proxy, both of which work.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["release_custom_gradients", "PREFIX"]

logger = logging.getLogger(__name__)

#: the names ``tf.custom_gradient`` registers in graph mode
PREFIX = "CustomGradient-"
_ON_GRAPH = "_trainguard_custom_gradients"
_PROXY_REFS = "_trainguard_graph_refs"
_MAX_NODES = 2000
_LOCK = threading.Lock()


def _registry() -> dict[str, Any] | None:
    ops = sys.modules.get("tensorflow.python.framework.ops")
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


def _graphs_of(fn: Callable[..., Any], graph_type: type) -> list[Any]:
    """The graphs whose tensors ``fn`` reaches through closures, lists, tuples and dicts."""
    found: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(fn, 0)]
    while stack and len(seen) < _MAX_NODES:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > 8:
            continue
        seen.add(id(obj))
        if isinstance(obj, graph_type):
            if all(g is not obj for g in found):
                found.append(obj)
            continue
        if type(obj).__name__ == "SymbolicTensor":
            stack.append((getattr(obj, "graph", None), depth + 1))
        elif callable(obj) and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                try:
                    stack.append((cell.cell_contents, depth + 1))
                except ValueError:  # an empty cell
                    continue
        elif isinstance(obj, (list, tuple)):
            stack.extend((x, depth + 1) for x in obj)
        elif isinstance(obj, dict):
            stack.extend((x, depth + 1) for x in obj.values())
    return found


def _proxy(name: str, refs: list[weakref.ref[Any]]) -> Callable[..., Any]:
    def custom_gradient_on_graph(op: Any, *grads: Any) -> Any:
        for ref in refs:
            functions = getattr(ref(), _ON_GRAPH, None)
            if functions and name in functions:
                return functions[name](op, *grads)
        raise LookupError(f"the gradient {name} was released with its graph, which no longer exists")

    setattr(custom_gradient_on_graph, _PROXY_REFS, refs)
    return custom_gradient_on_graph


def release_custom_gradients() -> dict[str, int] | bool:
    """Hand each ``CustomGradient-*`` registry entry to the graph it belongs to (see the module
    docstring), and drop the proxies whose graphs are gone.

    Returns:
        False when TensorFlow is not imported (or its registry is not where this expects it);
        else ``{"moved": n, "dropped": m}``. The graphs are freed by the next garbage collection.
    """
    registry = _registry()
    ops = sys.modules.get("tensorflow.python.framework.ops")
    graph_type = getattr(ops, "Graph", None)
    if registry is None or not isinstance(graph_type, type):
        return False
    moved = dropped = 0
    with _LOCK:
        for name in [k for k in list(registry) if isinstance(k, str) and k.startswith(PREFIX)]:
            entry = registry.get(name)
            if not isinstance(entry, dict) or entry.get("type") is None:
                continue
            fn = entry["type"]
            refs = getattr(fn, _PROXY_REFS, None)
            if refs is not None:
                if all(ref() is None for ref in refs):
                    registry.pop(name, None)
                    dropped += 1
                continue
            moved += _move(registry, name, entry, fn, graph_type)
    return {"moved": moved, "dropped": dropped}


def _move(registry: dict[str, Any], name: str, entry: dict[str, Any], fn: Any, graph_type: type) -> int:
    graphs = _graphs_of(fn, graph_type)
    if not graphs:
        return 0
    try:
        for graph in graphs:
            functions = getattr(graph, _ON_GRAPH, None)
            if functions is None:
                functions = {}
                setattr(graph, _ON_GRAPH, functions)
            functions[name] = fn
        refs = [weakref.ref(g) for g in graphs]
    except (AttributeError, TypeError) as err:  # a graph type without attributes or weak references
        logger.debug("cannot move %s onto its graph: %s", name, err)
        return 0
    registry[name] = {**entry, "type": _proxy(name, refs)}
    return 1
