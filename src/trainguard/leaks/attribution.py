"""What grows: census kinds per iteration, Python allocation sites, and framework hints.

Each census reading is reduced to ``{label: (count, nbytes)}`` for two granularities: kinds
(``tensorflow.Operation``) and, for objects with bytes, kind + dtype + shape
(``torch Tensor float32[512, 512] cpu``). Growth per iteration is the Theil-Sen slope of each label
over the readings taken after the warm-up, so one noisy reading does not name a culprit.
"""

from __future__ import annotations

import fnmatch
import gc
import logging
import sys
import tracemalloc
import warnings
from itertools import compress
from typing import Any

import numpy as np

from trainguard.leaks._evidence import CountPoint, take_counts
from trainguard.leaks._report import KindGrowth
from trainguard.leaks.stats import theil_sen

__all__ = [
    "CensusPoint",
    "take_census",
    "growth_by_kind",
    "framework_hints",
    "TracemallocProbe",
]

logger = logging.getLogger(__name__)


#: One census reduced to counts (the leak loop's count evidence uses the same points).
CensusPoint = CountPoint


#: Autograd nodes walked at most per census (a kept graph of 10,000 steps is ~70,000 nodes).
_MAX_AUTOGRAD_NODES = 200_000


def _torch_graph_tensors() -> tuple[int, int] | None:
    """Live torch tensors that hold an autograd graph, and the graph nodes they hold together.

    The nodes are C++ objects the GC does not see; they are reached through ``grad_fn`` and
    ``next_functions`` (each counted once, at most ``_MAX_AUTOGRAD_NODES``). ``total += loss``
    keeps every step's graph behind one tensor: the tensor count stays flat, the node count rises.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    count = 0
    tensor_type = torch.Tensor
    roots = []
    with warnings.catch_warnings():
        # a deprecated module attribute (torch.distributed.reduce_op) warns when it is looked at:
        # the user did not touch it, so they are not told
        warnings.simplefilter("ignore")
        for obj in instances_of(tensor_type):
            try:
                if obj.grad_fn is not None:
                    count += 1
                    roots.append(obj.grad_fn)
            except Exception:  # some tensor subclasses raise on attribute access
                continue
    # the Python wrapper of a node may be made on access and freed after: keeping each one until
    # the walk ends keeps its id from being reused by another node's wrapper
    seen: dict[int, Any] = {}
    stack = roots
    while stack and len(seen) < _MAX_AUTOGRAD_NODES:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        try:
            stack.extend(n for n, _ in node.next_functions)
        except Exception:  # a node without next_functions (custom Function internals)
            continue
    return count, len(seen)


def _tf_tracing_count() -> int | None:
    """The number of concrete functions traced so far by all live tf.function objects."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf
    except Exception:
        return None
    total = 0
    func_type = getattr(pf, "Function", None)
    if func_type is None:
        return None
    for obj in instances_of(func_type):
        try:
            total += int(obj.experimental_get_tracing_count())
        except Exception:
            continue
    return total


def instances_of(cls: type) -> list[Any]:
    """The GC-tracked objects whose type is ``cls`` or a subclass, filtered in C: each distinct
    type is tested once with ``issubclass`` (an ``isinstance`` per object went through ``abc``'s
    hooks, a quarter of a Keras census)."""
    objects = gc.get_objects()
    types = set(map(type, objects))
    wanted = set()
    for t in types:
        try:
            if issubclass(t, cls):
                wanted.add(t)
        except TypeError:
            continue
    if not wanted:
        return []
    return list(compress(objects, map(wanted.__contains__, map(type, objects))))


def extra_counts() -> dict[str, tuple[int, int]]:
    """Counts the census does not give: torch tensors that hold an autograd graph and the graph
    nodes they hold, and the tf.function tracing count (frameworks already imported only)."""
    out: dict[str, tuple[int, int]] = {}
    graph = _torch_graph_tensors()
    if graph is not None:
        out["torch.Tensor with grad_fn"] = (graph[0], 0)
        out["torch.autograd nodes"] = (graph[1], 0)
    tracing = _tf_tracing_count()
    if tracing is not None:
        out["tensorflow.tf.function traces"] = (tracing, 0)
    return out


def take_census(iteration: int) -> CensusPoint:
    """Count live objects now: framework objects, numpy arrays, Python instances by type, and the
    extra counts of :func:`extra_counts` (see :func:`trainguard.leaks._evidence.take_counts`)."""
    return take_counts(iteration, None)


def _slopes(points: list[CensusPoint], attr: str) -> dict[str, tuple[float, float]]:
    labels: set[str] = set()
    for p in points:
        labels.update(getattr(p, attr))
    x = np.array([p.iteration for p in points], dtype=float)
    out: dict[str, tuple[float, float]] = {}
    for label in labels:
        counts = np.array([getattr(p, attr).get(label, (0, 0))[0] for p in points], dtype=float)
        nbytes = np.array([getattr(p, attr).get(label, (0, 0))[1] for p in points], dtype=float)
        out[label] = (theil_sen(counts, x), theil_sen(nbytes, x))
    return out


def growth_by_kind(
    points: list[CensusPoint],
    *,
    from_iteration: int = 0,
    min_count_per_iter: float = 0.2,
    min_bytes_per_iter: float = 1024.0,
    limit: int = 12,
) -> tuple[KindGrowth, ...]:
    """Kinds whose count or bytes grow per iteration over the census points at or after ``from_iteration``.

    Args:
        points: census readings in order.
        from_iteration: ignore readings before this iteration (the warm-up).
        min_count_per_iter: smallest count slope reported.
        min_bytes_per_iter: smallest byte slope reported.
        limit: most entries returned.

    Returns:
        KindGrowth entries, bytes then count descending; detailed (dtype/shape) entries follow
        the kind they belong to when they carry bytes.
    """
    usable = [p for p in points if p.iteration >= from_iteration]
    if len(usable) < 3:
        usable = points[-3:] if len(points) >= 3 else points
    if len(usable) < 2 or usable[-1].iteration == usable[0].iteration:
        return ()
    out: list[KindGrowth] = []
    for label, (dc, db) in _slopes(usable, "kinds").items():
        if dc >= min_count_per_iter or db >= min_bytes_per_iter:
            out.append(KindGrowth(label, round(dc, 2), round(db, 1)))
    for label, (dc, db) in _slopes(usable, "detailed").items():
        if db >= min_bytes_per_iter:
            out.append(KindGrowth(label, round(dc, 2), round(db, 1), detail="by dtype and shape"))
    out.sort(key=lambda g: (kind_rank(g.kind), -g.bytes_per_iter, -g.count_per_iter, g.kind))
    # builtins are the heap's churn: a few that grow by at least one a call are enough
    builtins = [g for g in out if kind_rank(g.kind) == 3 and g.count_per_iter >= 1][:3]
    return tuple([g for g in out if kind_rank(g.kind) < 3][: limit - len(builtins)] + builtins)


def kind_rank(kind: str) -> int:
    """Order of interest: framework objects and arrays (0), container entries (1), instances of
    classes that are not builtins (2), builtins such as dict, list, tuple (3)."""
    if kind.startswith("entries of "):
        return 1
    if kind.startswith("python."):
        name = kind.removeprefix("python.")
        return 2 if "." in name and name.split(".", 1)[0] not in sys.stdlib_module_names else 3
    return 0


def framework_hints(growth: tuple[KindGrowth, ...], modules: set[str] | None = None) -> tuple[str, ...]:
    """Explanations for well-known growth patterns, from the kinds that grow (``modules`` is
    accepted for callers that pass it; the hints depend on the kinds alone)."""
    del modules
    kinds = {g.kind: g for g in growth}
    hints: list[str] = []
    traces = kinds.get("tensorflow.tf.function traces")
    if traces and traces.count_per_iter >= 0.2:
        hints.append(
            f"tf.function retraces ({traces.count_per_iter:+.1f} traces/iter): it is called with new Python "
            "values or shapes each time; pass tensors, fix input_signature, or use reduce_retracing=True"
        )
    tf_graph = [
        g
        for k, g in kinds.items()
        if k.startswith("tensorflow.")
        and k.split(".", 1)[1]
        in ("Operation", "SymbolicTensor", "FuncGraph", "ConcreteFunction", "Graph", "AtomicFunction")
    ]
    if tf_graph:
        names = ", ".join(f"{g.kind.split('.', 1)[1]} {g.count_per_iter:+,.0f}/iter" for g in tf_graph)
        text = f"TensorFlow graph objects accumulate ({names})"
        text += (
            ": a tf.custom_gradient traced inside a tf.function (Keras' TensorFlow optimizer uses one "
            "in every train step) registers its gradient in TensorFlow's global gradient registry, "
            "which keeps the whole traced graph for good; trainguard.frameworks.cleanup() or "
            "trainguard.scope() releases them after each fit, and Runner workers do it by default"
        )
        hints.append(text)
    keras_kinds = [g for k, g in kinds.items() if k.startswith("keras.") and g.count_per_iter >= 0.2]
    if keras_kinds:
        names = ", ".join(f"{g.kind.split('.', 1)[1]} {g.count_per_iter:+,.1f}/iter" for g in keras_kinds)
        hints.append(
            f"Keras objects accumulate ({names}): something keeps models or layers alive, or Keras global "
            "state grows; call keras.backend.clear_session() between models and drop references to them"
        )
    graph = kinds.get("torch.Tensor with grad_fn")
    if graph and graph.count_per_iter >= 0.2:
        hints.append(
            f"torch tensors that hold an autograd graph accumulate ({graph.count_per_iter:+.1f}/iter): a tensor "
            "kept across iterations keeps its whole graph alive (e.g. `total_loss += loss`, a list of losses); "
            "keep `loss.item()` or `loss.detach()` instead"
        )
    return tuple(hints)


def _user_frame(traceback: tracemalloc.Traceback) -> tracemalloc.Frame | None:
    """The innermost frame of the user's own code in a traced stack (the innermost frame when the
    stack holds none); None for the check's own bookkeeping (trainguard code called from it)."""
    from trainguard.leaks.holders import is_user_file

    frames = list(traceback)  # oldest call first (Python >= 3.7)
    for frame in reversed(frames):
        if frame.filename.startswith(_PACKAGE_DIR):
            return None
        if is_user_file(frame.filename):
            return frame
    return frames[-1]


_PACKAGE_DIR = __file__.rsplit("/", 2)[0] + "/"


def _measuring_frame(filename: str) -> bool:
    """An allocation made by tracemalloc itself or by the import system (``<frozen ...>``), as
    named by its most recent frame: never the step's."""
    return filename == tracemalloc.__file__ or fnmatch.fnmatchcase(filename, "<frozen *>")


class TracemallocProbe:
    """Python allocation sites that grow between two snapshots (slow: tracemalloc traces every allocation).

    Each allocation is traced with ``frames`` frames of its stack, and a site is named by the first
    frame in the user's own code (not the standard library, site-packages or trainguard): the
    numpy array a step appends to a list is then the user's ``append`` line, not numpy's
    ``numeric.py``. ``full_stack=True`` adds the whole traced stack to each site's detail.
    """

    def __init__(self, frames: int = 32, *, full_stack: bool = False) -> None:
        self._frames = frames
        self._full_stack = full_stack
        self._first: tracemalloc.Snapshot | None = None
        self._first_iteration = 0
        self._started_here = False

    def start(self) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(self._frames)
            self._started_here = True

    def mark(self, iteration: int) -> None:
        """Take the reference snapshot (after the warm-up)."""
        self._first = tracemalloc.take_snapshot()
        self._first_iteration = iteration

    def growth(
        self, iteration: int, *, limit: int = 8, min_bytes_per_iter: float = 256.0
    ) -> tuple[KindGrowth, ...]:
        """Sites that grew since :meth:`mark`, per iteration, each named by its first user frame."""
        if self._first is None or iteration <= self._first_iteration:
            return ()
        snap = tracemalloc.take_snapshot()
        # grouped by whole traceback, then tracemalloc's own and the import system's allocations
        # left out by their most recent frame: what Snapshot.filter_traces would leave, without its
        # fnmatch per trace (60 s of a 10 s check in a test process of a few million traces)
        stats = snap.compare_to(self._first, "traceback")
        span = iteration - self._first_iteration
        sites: dict[str, list[Any]] = {}
        for s in stats:
            if s.size_diff <= 0 or _measuring_frame(s.traceback[-1].filename):
                continue
            frame = _user_frame(s.traceback)
            if frame is None:
                continue
            site = sites.setdefault(f"{frame.filename}:{frame.lineno}", [0, 0, s.traceback])
            site[0] += s.size_diff
            site[1] += s.count_diff
        out: list[KindGrowth] = []
        for where, (size, count, tb) in sorted(sites.items(), key=lambda kv: -kv[1][0]):
            if size / span < min_bytes_per_iter or len(out) >= limit:
                continue
            detail = "tracemalloc"
            if self._full_stack:
                detail += ": " + " -> ".join(f"{f.filename}:{f.lineno}" for f in tb)
            out.append(
                KindGrowth(f"python {where}", round(count / span, 2), round(size / span, 1), detail=detail)
            )
        return tuple(out)

    def stop(self) -> None:
        if self._started_here:
            tracemalloc.stop()
            self._started_here = False

    def __enter__(self) -> TracemallocProbe:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
