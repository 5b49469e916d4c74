"""Count evidence for the leak check: exact counts of live objects at readings.

At readings the budget allows, the loop takes a census (:func:`take_counts`): framework tensors
and graph objects and numpy arrays (:mod:`trainguard.probes.census`), Python instances by type,
and the number of entries of every container that was alive before the first call. Those
containers are frozen with ``gc.freeze()`` (so each reading's ``gc.collect()`` stays cheap), which
also hides them from ``gc.get_objects()``: a module-level list that collects arrays would
otherwise be invisible. :class:`ContainerWatch` remembers them before the freeze and reads their
lengths at each census (7 ms for the 79,000 containers of a process with TensorFlow, Keras and
torch loaded); those that grew are searched for numpy arrays too.

:func:`count_support` is the pure part: given the census points and the memory series, which
kinds' counts support an early ``leak`` (:func:`trainguard.leaks.stats.count_trend`), which rose
and stopped (a bounded cache, a pool), and whether counts found nothing at all.

Cost: a census is taken at a reading only when its measured cost is at most ``CENSUS_SHARE`` of
the time spent in the step since the last census (:func:`census_gap`); when even one census per
``MAX_CENSUS_GAP`` readings would break that, counts are left out with a note and the verdict rests
on memory alone.
"""

from __future__ import annotations

import collections
import functools
import gc
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainguard.leaks import stats

__all__ = [
    "CENSUS_SHARE",
    "MAX_CENSUS_GAP",
    "ContainerWatch",
    "CountPoint",
    "Holder",
    "holder_allowance",
    "CountSupport",
    "FlatCounts",
    "flat_counts",
    "take_counts",
    "census_gap",
    "census_fallback",
    "count_support",
    "qualifies",
    "attach_holders",
    "suspected_kinds",
    "evidence_dict",
    "support_text",
    "exact_nbytes",
]

#: Census time aimed at, as a share of the time spent in the step.
CENSUS_SHARE = 0.05
#: Counts taken less often than once every this many readings are too sparse to be evidence.
MAX_CENSUS_GAP = 8
#: The share of the memory slope a kind's bytes must explain for its count to support a leak.
MIN_BYTES_SHARE = 0.25
_CONTAINER_TYPES = frozenset({list, dict, set, collections.deque, collections.OrderedDict})
_FRAMEWORKS = ("torch", "tensorflow", "keras", "jax", "numpy")
#: Kinds counted with 0 bytes whose objects hold native memory (graphs, traces, models).
_NATIVE_HOLDER_PREFIXES = (
    "tensorflow.",
    "keras.",
    "torch.Module",
    "torch.Tensor with grad_fn",
    "torch.autograd nodes",
    "jax.",
)
#: Kinds nobody keeps a bounded cache of: tensors that hold their autograd graph after the step,
#: the graph nodes they hold, and tf.function traces. Steady growth of these is the documented bug
#: pattern (torch's FAQ "accumulating history across your training loop"; TensorFlow itself warns
#: after 5 retracings), so their count need only pass GRAPH_FILL_ALLOWANCE, not the fill allowance
#: of a cache (``stats.count_trend``'s 128, ``functools.lru_cache``'s default size).
_GRAPH_KINDS = ("torch.Tensor with grad_fn", "torch.autograd nodes", "tensorflow.tf.function traces")
GRAPH_FILL_ALLOWANCE = 8


@dataclass(frozen=True, slots=True)
class Holder:
    """What is known of the container behind an ``entries of ...`` kind at one census.

    Attributes:
        kind: ``list``, ``dict``, ``set``, ``deque`` or ``OrderedDict``.
        bound: the most entries it can hold (``deque(maxlen=)``), or None.
        append_only: a list that, since the check first saw it grow, has only grown at its end:
            the entry that was last at the previous census is still in its place.
        exact_bytes: the bytes of every entry added since are exact (numpy arrays by their owning
            buffer, torch tensors by ``nbytes``, or tuples/lists of them): the kind's bytes are
            those, with no allocator noise.
    """

    kind: str
    bound: int | None = None
    append_only: bool = False
    exact_bytes: bool = False


@dataclass(frozen=True, slots=True)
class CountPoint:
    """One census after ``iteration`` calls: ``{kind: (count, nbytes)}``, plus per-dtype/shape
    detail for kinds with bytes, what the census cost, and what is known of the containers behind
    the ``entries of ...`` kinds (``holders``)."""

    iteration: int
    kinds: dict[str, tuple[int, int]]
    detailed: dict[str, tuple[int, int]]
    cost_s: float = 0.0
    holders: dict[str, Holder] = field(default_factory=dict)


class ContainerWatch:
    """The containers alive before the first call, and their lengths then.

    Built before ``gc.freeze()``: tracked lists, dicts, sets and deques, plus the untracked dicts
    that module globals refer to (CPython does not track a dict that holds only numbers, strings or
    arrays, such as ``_cache = {}`` filled with arrays).
    """

    def __init__(self) -> None:
        objects = gc.get_objects()
        containers = [o for o in objects if type(o) in _CONTAINER_TYPES]
        modules = [m.__dict__ for m in list(sys.modules.values()) if hasattr(m, "__dict__")]
        seen = set(map(id, containers))
        for value in gc.get_referents(*modules):
            if type(value) in _CONTAINER_TYPES and id(value) not in seen and not gc.is_tracked(value):
                containers.append(value)
                seen.add(id(value))
        self.containers = containers
        self.base = np.array(list(map(len, containers)), dtype=np.int64)
        #: ``functools.lru_cache`` wrappers: their results are reachable only through the wrapper
        #: (frozen with it), so one that grew is a census root like a grown container, and its
        #: ``maxsize`` is its bound (a fill, never a leak on its own)
        self.caches = [o for o in objects if type(o) is _LRU_TYPE]
        self.cache_base = [_lru_size(o) for o in self.caches]
        self.names = _global_names(seen)
        #: per grown list: [length at the last census, id of its last entry then, exact bytes of
        #: the entries added since it was first seen grown (None once one is not exact),
        #: append-only so far]
        self.tails: dict[int, list[Any]] = {}

    def grown(self) -> list[tuple[int, Any, int]]:
        """``(index, container, length)`` of the containers longer than at the start."""
        lens = np.array(list(map(len, self.containers)), dtype=np.int64)
        idx = np.nonzero(lens > self.base)[0]
        out = [(int(i), self.containers[i], int(lens[i])) for i in idx]
        offset = len(self.containers)
        for j, (cache, base) in enumerate(zip(self.caches, self.cache_base, strict=True)):
            size = _lru_size(cache)
            if size > base:
                out.append((offset + j, cache, size))
        return out

    def holder(self, index: int, length: int) -> tuple[Holder, int]:
        """What is known of grown container ``index`` (now ``length`` long), and the exact bytes
        of the entries a list added since the check first saw it grow (0 when not known).

        For a list, only the entries past the length at the previous census are read (a census
        stays cheap however long the list): the list is append-only while the entry that was last
        then is still the same object in the same place."""
        if index >= len(self.containers):
            maxsize = self.caches[index - len(self.containers)].cache_info().maxsize
            return Holder("lru_cache", bound=maxsize), 0
        c = self.containers[index]
        if type(c) is collections.deque:
            return Holder("deque", bound=c.maxlen), 0
        if type(c) is not list:
            return _OTHER_HOLDERS.get(type(c)) or Holder(type(c).__name__), 0
        tail = self.tails.get(index)
        if tail is None:
            start = int(self.base[index])
            tail = [start, id(c[start - 1]) if start > 0 else None, 0, True]
            self.tails[index] = tail
        prev_len, prev_id, nbytes, append_only = tail
        if append_only and (length < prev_len or (prev_len > 0 and id(c[prev_len - 1]) != prev_id)):
            append_only = False
        if append_only and nbytes is not None:
            added = [exact_nbytes(o) for o in c[prev_len:length]]
            nbytes = None if any(b is None for b in added) else nbytes + sum(b for b in added if b)
        tail[:] = [length, id(c[length - 1]) if length > 0 else None, nbytes, append_only]
        exact = append_only and nbytes is not None and nbytes > 0
        return Holder("list", append_only=append_only, exact_bytes=exact), (nbytes if exact else 0)

    def label(self, index: int) -> str:
        if index >= len(self.containers):
            cache = self.caches[index - len(self.containers)]
            return f"entries of lru_cache {getattr(cache, '__qualname__', '?')}"
        c = self.containers[index]
        name = self.names.get(id(c))
        if name:
            return f"entries of {type(c).__name__} {name}"
        # no module global names it: say what it held before the first call (a kind, not an id)
        return f"entries of {type(c).__name__} (unnamed, {int(self.base[index]):,} before the first call)"

    def release(self) -> None:
        self.caches, self.cache_base = [], []
        self.containers = []
        self.base = np.zeros(0, dtype=np.int64)
        self.tails = {}


_LRU_TYPE = type(functools.lru_cache(maxsize=1)(len))


def _lru_size(cache: Any) -> int:
    try:
        return int(cache.cache_info().currsize)
    except Exception:  # a wrapper's own cache_info must never cost the census
        return 0


_OTHER_HOLDERS: dict[type, Holder] = {t: Holder(t.__name__) for t in _CONTAINER_TYPES}


def exact_nbytes(obj: Any) -> int | None:
    """The exact bytes an entry keeps alive, when they are known without allocator noise: a numpy
    array's owning buffer (a view keeps its base alive), a torch tensor's ``nbytes``, or the sum
    over a tuple or list of those; None for anything else (Python objects, whose size is not what
    they hold)."""
    t = type(obj)
    if t is tuple or t is list:
        if not obj or len(obj) > 16:
            return None
        total = 0
        for o in obj:
            part = exact_nbytes(o)
            if part is None:
                return None
            total += part
        return total
    module = getattr(t, "__module__", "")
    if not isinstance(module, str):  # a class may define __module__ as a descriptor (Keras does)
        return None
    if module.startswith("numpy"):
        ndarray = np.ndarray
        if not isinstance(obj, ndarray):
            return None
        owner = obj
        while isinstance(owner.base, ndarray):
            owner = owner.base
        return int(owner.nbytes)
    if module.startswith("torch"):
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(obj, torch.Tensor):
            return None
        return int(obj.nbytes)
    return None


def _global_names(ids: set[int]) -> dict[int, str]:
    """``module.name`` for module globals among ``ids`` (the user's own modules win)."""
    out: dict[int, str] = {}
    for mod_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        short = (
            _file_stem(module) if mod_name == "__main__" or mod_name.startswith("__trainguard") else mod_name
        )
        for name, value in list(namespace.items()):
            if id(value) in ids and (id(value) not in out or _is_user_module(module)):
                out[id(value)] = f"{short}.{name}"
    return out


def _file_stem(module: Any) -> str:
    path = getattr(module, "__file__", None) or "module"
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def _is_user_module(module: Any) -> bool:
    from trainguard.leaks.holders import is_user_file

    return is_user_file(getattr(module, "__file__", None) or "")


def _python_types(objects: list[Any]) -> dict[str, tuple[int, int]]:
    """Counts of tracked objects by type, for classes of the user's code and third-party packages.

    Builtins and the standard library (dict, list, tuple, function...) are left out: they are the
    churn of every heap, never evidence on their own, and keeping hundreds of them at every census
    made the check's own memory grow by about a kilobyte a call on a fast step. Framework types are
    the framework census's."""
    out: dict[str, tuple[int, int]] = {}
    for t, n in Counter(map(type, objects)).items():
        module = getattr(t, "__module__", "") or ""
        if not isinstance(module, str):
            continue
        top = module.split(".", 1)[0]
        if top in _FRAMEWORKS or top in ("trainguard", "builtins") or top in sys.stdlib_module_names:
            continue
        name = t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"
        out[f"python.{name}"] = (int(n), 0)
    return out


def take_counts(iteration: int, watch: ContainerWatch | None) -> CountPoint:
    """One census: framework objects and numpy arrays (also inside grown frozen containers),
    Python instances by type, entries of grown containers, torch graph tensors and tf.function
    traces."""
    import time

    from trainguard.leaks.attribution import extra_counts
    from trainguard.probes.census import census

    t0 = time.perf_counter()
    grown = watch.grown() if watch is not None else []
    c = census(roots=[g[1] for g in grown])
    kinds = dict(c.by_kind())
    detailed: dict[str, tuple[int, int]] = {}
    for e in c.entries:
        if e.nbytes > 0:
            count, nbytes = detailed.get(e.describe(), (0, 0))
            detailed[e.describe()] = (count + e.count, nbytes + e.nbytes)
    kinds.update(_python_types(gc.get_objects()))
    holders: dict[str, Holder] = {}
    if watch is not None:
        for i, _, n in grown:
            label = watch.label(i)
            try:
                holder, nbytes = watch.holder(i, n)
            except Exception:  # what a container holds must never cost the census
                holder, nbytes = _OTHER_HOLDERS[list], 0
            if holder_allowance(holder) != (None, None):
                holders[label] = holder  # only what changes a verdict is kept at every census
            kinds[label] = (n, nbytes)
    kinds.update(extra_counts())
    return CountPoint(
        iteration, _shared_keys(kinds), _shared_keys(detailed), time.perf_counter() - t0, holders
    )


#: every kind's name as the first census made it: the check keeps every census it takes, and a new
#: string per kind per census (about 25 kinds of 40-90 bytes) grew the measured process, read as the
#: step's growth where a census follows most calls (a no-op step read every call: 1.39-1.80 KiB a
#: call with new names, 1.24-1.40 with shared ones; tests/integration/test_leak_self_growth.py)
_KEY_NAMES: dict[str, str] = {}


def _shared_keys(counts: dict[str, Any]) -> dict[str, Any]:
    """``counts`` with each name the same string object as in earlier censuses."""
    return {_KEY_NAMES.setdefault(k, k): v for k, v in counts.items()}


def census_gap(cost_s: float, block_s: float, *, share: float = CENSUS_SHARE) -> int:
    """Readings between two censuses so that census time stays within ``share`` of step time.

    Args:
        cost_s: what the last census took.
        block_s: time in the step between two readings.
        share: the census's share of step time.

    Returns:
        1 (every reading) or more; above MAX_CENSUS_GAP counts are left out.
    """
    if cost_s <= 0:
        return 1
    return max(1, math.ceil(cost_s / max(share * block_s, 1e-12)))


#: Counts are evidence only when the budget pays for at least this many censuses.
MIN_CENSUSES = 12


def census_fallback(
    cost_s: float,
    budget_s: float,
    *,
    share: float = CENSUS_SHARE,
    taken: int = 0,
    spent_s: float = 0.0,
) -> str:
    """A note when MIN_CENSUSES censuses cannot be had within ``share`` of ``budget_s`` seconds of
    step time (counts are then left out), else ``""``: the ``taken`` ones so far, which cost
    ``spent_s`` together, and as many more as the rest pays for at ``cost_s`` each (a heap that
    grows makes the later ones dearer than the first)."""
    if cost_s <= 0 or budget_s <= 0:
        return ""
    affordable = taken + max(share * budget_s - spent_s, 0.0) / cost_s
    if affordable >= MIN_CENSUSES:
        return ""
    took = f"{cost_s * 1000:.0f} ms" if cost_s < 1 else f"{cost_s:.1f} s"
    return (
        f"a census of live objects takes {took}: the budget pays for {int(affordable)} of them within "
        f"{share:.0%} of the step time, fewer than the {MIN_CENSUSES} count evidence needs, so counts "
        "were left out and the verdict rests on memory alone"
    )


#: The fill allowance of an append-only list whose entries' exact bytes do not shrink.
LIST_FILL_ALLOWANCE = 8


def holder_allowance(holder: Holder | None) -> tuple[int | None, float | None]:
    """``(fill allowance, bytes max slowdown)`` for an ``entries of ...`` kind from what is known of
    its container (None, None: ``stats.count_trend``'s defaults, a cache's 128 objects).

    * A container with a bound (``deque(maxlen=N)``) is a fill up to N: its count can never pass
      the allowance, so it never supports a leak on its own.
    * A list that has only grown at its end, by entries whose exact bytes are known (arrays,
      tensors), must pass LIST_FILL_ALLOWANCE entries, not a cache's 128, provided the bytes it
      added do not slow down at all (``bytes_max_slowdown`` 0): a warm-up pool's entries shrink as
      it fills (an allocator's size classes, a kernel cache), a list that collects one result a call
      does not. A list trimmed to a window by the user's code (``del history[0]`` once it is full)
      grows the same way until the window is full: the verdict's reason says that the early call
      rests on this holder, so the user can judge.
    * Dicts and sets (caches keyed by the input) keep the cache allowance: a dict filled one key a
      call up to a bound in the user's code looks exactly like an unbounded one until the bound.
    """
    if holder is None:
        return None, None
    if holder.bound is not None:
        return holder.bound, None
    if holder.kind == "list" and holder.append_only and holder.exact_bytes:
        return LIST_FILL_ALLOWANCE, 0.0
    return None, None


def fill_allowance(kind: str) -> int | None:
    """The objects a bounded cache or pool of ``kind`` may hold before its growth can support a
    leak: GRAPH_FILL_ALLOWANCE for kinds nobody caches (graph-holding tensors, autograd nodes,
    traces), else None (``stats.count_trend``'s default)."""
    return GRAPH_FILL_ALLOWANCE if kind in _GRAPH_KINDS else None


def still_rising(points: list[CountPoint], *, readings: int = 3) -> bool:
    """Whether some kind that could hold memory (objects with bytes, or a kind that
    :func:`qualifies` on its own) rose at each of the last ``readings`` censuses; cheap, no
    statistics: the loop asks it at every reading while it reads call by call."""
    if len(points) < 2:
        return True
    last = points[-readings:]
    for label, (count, nbytes) in last[-1].kinds.items():
        if count <= last[0].kinds.get(label, (0, 0))[0] or not (nbytes > 0 or qualifies(label, 0.0, 0.0)):
            continue
        seq = [p.kinds.get(label, (0, 0))[0] for p in last]
        if all(b > a for a, b in zip(seq, seq[1:], strict=False)):
            return True
    return False


def qualifies(kind: str, bytes_per_iter: float, memory_slope: float) -> bool:
    """Whether a kind's count can support a leak: its bytes explain at least MIN_BYTES_SHARE of
    the memory slope, or it is a kind whose objects hold native memory the census cannot see (graph
    objects, traces, models, tensors holding an autograd graph), or instances of a class that is not
    a builtin. Plain containers and builtins (a list of floats, dicts) never qualify on their own."""
    if bytes_per_iter > 0 and memory_slope > 0 and bytes_per_iter >= MIN_BYTES_SHARE * memory_slope:
        return True
    if kind.startswith(_NATIVE_HOLDER_PREFIXES):
        return True
    name = kind.removeprefix("python.")
    return kind.startswith("python.") and "." in name and name.split(".", 1)[0] not in sys.stdlib_module_names


@dataclass(frozen=True, slots=True)
class KindEvidence:
    """One kind's count trend, with the share of the memory slope its bytes explain."""

    kind: str
    trend: stats.CountTrend
    bytes_share: float | None
    qualifies: bool

    def to_dict(self) -> dict[str, Any]:
        t = self.trend
        return {
            "kind": self.kind,
            "status": t.status,
            "count_per_iter": round(t.count_per_iter, 3),
            "bytes_per_iter": round(t.bytes_per_iter, 1),
            "bytes_share": None if self.bytes_share is None else round(self.bytes_share, 3),
            "rising_readings": t.run_readings,
            "rising_calls": t.run_calls,
            "grown": t.grown,
            "p_value": t.p_value,
            "qualifies": self.qualifies,
        }


@dataclass(frozen=True, slots=True)
class CountSupport:
    """What the counts say at one look.

    Attributes:
        supports: some qualifying kind's count grows like a leak (:func:`stats.count_trend`).
        kinds: the kinds that rose at all (grows, filling, slowing, plateau), strongest first.
        found_nothing: no kind that could hold memory (:func:`qualifies`) rose at all.
    """

    supports: bool
    kinds: tuple[KindEvidence, ...]
    found_nothing: bool

    def growing(self) -> tuple[KindEvidence, ...]:
        return tuple(k for k in self.kinds if k.trend.status == "grows" and k.qualifies)


_STATUS_ORDER = {"grows": 0, "filling": 1, "slowing": 2, "plateau": 3}


def count_support(
    points: list[CountPoint], series: list[dict[str, Any]], *, alpha: float, key: str = "bytes"
) -> CountSupport:
    """Which kinds' exact counts support a leak at this look (pure: census points and readings in).

    The false-positive budget ``alpha`` (this look's) is split over the kinds that rose and could
    support a leak (:func:`qualifies`).
    """
    if len(points) < 2:
        return CountSupport(False, (), False)
    xs = [p.iteration for p in points]
    labels = {k for p in points for k in p.kinds}
    rising = []
    for label in labels:
        counts = [p.kinds.get(label, (0, 0))[0] for p in points]
        if counts[-1] > counts[0]:
            rising.append((label, counts, [p.kinds.get(label, (0, 0))[1] for p in points]))
    memory = _memory_slope(series, key, xs[0])
    # nothing that could hold memory is higher at the last census than at the first (a few log
    # records or list entries of the process around the step do not hold it)
    # (a container whose entries still rose at the last census is Python-visible growth too,
    # whatever it holds; one that filled a few entries and stopped is not)
    nothing = not any(
        qualifies(label, _slope(b, xs), memory) or (label.startswith("entries of ") and c[-1] > c[-2])
        for label, c, b in rising
    )
    # the budget is split over the kinds that could support a leak: testing the others spends none
    holders = points[-1].holders
    first = [(label, _trend(label, c, xs, b, alpha, holders.get(label)), c, b) for label, c, b in rising]
    eligible = [f for f in first if qualifies(f[0], f[1].bytes_per_iter, memory)]
    alpha_kind = alpha / max(1, len(eligible))
    found = []
    for label, trend, counts, nbytes in first:
        ok = qualifies(label, trend.bytes_per_iter, memory)
        if ok:
            trend = _trend(label, counts, xs, nbytes, alpha_kind, holders.get(label))
        if trend.status in _STATUS_ORDER:
            share = trend.bytes_per_iter / memory if trend.bytes_per_iter > 0 and memory > 0 else None
            found.append(KindEvidence(label, trend, share, ok))
    found.sort(key=lambda k: (_STATUS_ORDER[k.trend.status], not k.qualifies, -k.trend.count_per_iter))
    supports = any(k.trend.status == "grows" and k.qualifies for k in found)
    return CountSupport(supports, tuple(found), nothing)


@dataclass(frozen=True, slots=True)
class FlatCounts:
    """Every kind the censuses counted, exactly flat over the last censuses: none above where it
    stood at ``from_iteration`` (0 objects a call), over ``censuses`` censuses spanning ``calls``
    calls (``stats.flat_since`` of each kind, the latest start of them all)."""

    from_iteration: int
    censuses: int
    calls: int
    kinds: int


def flat_counts(points: list[CountPoint]) -> FlatCounts:
    """How long every counted kind has been exactly flat (pure: census points in). A kind missing
    from a census counts 0 there (it appears when it first has objects, e.g. a container that grew)."""
    if not points:
        return FlatCounts(0, 0, 0, 0)
    labels = {k for p in points for k in p.kinds}
    start = 0
    for label in labels:
        start = max(start, stats.flat_since([p.kinds.get(label, (0, 0))[0] for p in points]))
    first = points[start].iteration
    return FlatCounts(first, len(points) - start, points[-1].iteration - first, len(labels))


def _trend(
    label: str, counts: list[int], xs: list[int], nbytes: list[int], alpha: float, holder: Holder | None
) -> stats.CountTrend:
    allowance, byte_slack = holder_allowance(holder)
    if allowance is None:
        allowance = fill_allowance(label)
    options: dict[str, Any] = {}
    if allowance is not None:
        options["fill_allowance"] = allowance
    if byte_slack is not None:
        options["bytes_max_slowdown"] = byte_slack
    return stats.count_trend(counts, xs, nbytes, alpha=alpha, **options)


def _slope(values: list[int], xs: list[int]) -> float:
    span = xs[-1] - xs[0]
    return (values[-1] - values[0]) / span if span > 0 else 0.0


def _memory_slope(series: list[dict[str, Any]], key: str, from_iteration: int) -> float:
    rows = [r for r in series if r["iteration"] >= from_iteration and r.get(key) is not None]
    if len(rows) < 3:
        return 0.0
    return stats.theil_sen([r[key] for r in rows], [r["iteration"] for r in rows])


def _family(kind: str) -> str:
    """The framework or origin of a kind: ``numpy`` for ``numpy.ndarray`` and for its detailed
    ``numpy ndarray float64[64] cpu``, ``entries`` for a container's entries."""
    return kind.replace(" ", ".", 1).split(".", 1)[0]


def suspected_kinds(
    growth: tuple[Any, ...], support: CountSupport | None, *, cleared: bool
) -> frozenset[str]:
    """The kinds of ``growth`` whose holders are worth a search (pure).

    The search walks the heap (up to seconds on a TensorFlow process), so it runs only on what is
    suspected. A verdict that does not clear the step (``leak``, ``inconclusive``, and ``plateau``,
    whose memory rose and stopped: the user reads what filled): every kind that grows, as before.
    A ``no_leak`` (``cleared``): only the kinds the censuses saw rise at the last look (grows,
    filling, slowing or plateau) and the dtype-and-shape detail of their family; a kind that only
    the slope over a few censuses puts above zero (one object more at one census) is not searched.

    Args:
        growth: the report's ``KindGrowth`` entries.
        support: what the counts said at the last look, or None (counts off or left out).
        cleared: the verdict is ``no_leak``.

    Returns:
        The kinds whose holder chains may be searched.
    """
    if not cleared:
        return frozenset(g.kind for g in growth)
    rose = {k.kind for k in support.kinds} if support is not None else set()
    families = {_family(k) for k in rose}
    return frozenset(
        g.kind
        for g in growth
        if g.kind in rose or (g.detail == "by dtype and shape" and _family(g.kind) in families)
    )


def attach_holders(
    growth: tuple[Any, ...],
    watch: ContainerWatch | None,
    *,
    top: int = 6,
    only: frozenset[str] | None = None,
) -> tuple[Any, ...]:
    """``growth`` with a referrer chain (:mod:`trainguard.leaks.holders`) on its top kinds that
    grow in count (among ``only`` when given, :func:`suspected_kinds`). Run before
    ``gc.unfreeze()``: objects outside the frozen generation are the ones the iterations created,
    and only those are accepted as a sample of what grows. Nothing to search: no heap walk at all."""
    from dataclasses import replace

    from trainguard.leaks.attribution import kind_rank
    from trainguard.leaks.holders import holder_chains, kind_predicate

    new_ids: set[int] = set()  # filled below, only when there is something to search

    def new(o: Any) -> bool:
        return not gc.is_tracked(o) or id(o) in new_ids

    predicates: dict[str, Any] = {}
    for g in growth:
        if len(predicates) >= top or g.count_per_iter <= 0 or kind_rank(g.kind) == 3:
            continue
        if g.detail not in ("", "by dtype and shape") or (only is not None and g.kind not in only):
            continue
        test = _container_predicate(g.kind, watch)
        if test is None and (kind_test := kind_predicate(g.kind)) is not None:
            test = lambda o, t=kind_test: t(o) and new(o)  # noqa: E731
        if test is not None:
            predicates[g.kind] = test
    if not predicates:
        return growth
    new_ids.update(map(id, gc.get_objects()))
    chains = holder_chains(predicates)
    for kind in predicates:
        if kind not in chains and kind.startswith(("tensorflow.", "keras.")):
            chains[kind] = (
                "no chain from a Python root within the search's budget: held inside TensorFlow "
                "(most often by its gradient registry, where tf.custom_gradient pins each traced graph "
                "that used it), which Keras' clear_session() does not release"
            )
    return tuple(replace(g, holder=chains[g.kind]) if g.kind in chains else g for g in growth)


def _container_predicate(kind: str, watch: ContainerWatch | None) -> Any:
    if watch is None or not kind.startswith("entries of "):
        return None
    for i, c in enumerate(watch.containers):
        if watch.label(i) == kind:
            return lambda o, c=c: o is c
    return None


def support_text(support: CountSupport, points: list[CountPoint]) -> str:
    """What an early ``leak`` rests on, in words: the kind that grows, and, when the early call
    came from its holder (an append-only list of exact bytes, :func:`holder_allowance`), the
    holder and its bytes, so that the user can judge the call."""
    from trainguard.units import format_bytes

    best = support.growing()[0]
    t = best.trend
    text = f"{best.kind} rose at every census for {t.run_calls} calls ({t.count_per_iter:+,.1f}/iter)"
    holder = points[-1].holders.get(best.kind) if points else None
    if holder is None or holder_allowance(holder)[0] != LIST_FILL_ALLOWANCE:
        return text
    return text + (
        f"; this rests on the holder: a list that only grew at its end, by "
        f"{format_bytes(t.bytes_per_iter)} a call of arrays or tensors whose bytes are exact "
        "(numpy nbytes, tensor sizes) and do not shrink as a warm-up pool's do, past the "
        f"{LIST_FILL_ALLOWANCE} entries an early call allows (dict and set caches must pass 128); "
        "if your code trims this list to a window, it is a fill, not a leak"
    )


def evidence_dict(support: CountSupport | None, fallback: str, points: list[CountPoint]) -> dict[str, Any]:
    """The report's ``counts`` section: status, note, and the kinds that rose."""
    cost = float(np.median([p.cost_s for p in points[1:]])) if len(points) > 1 else 0.0
    base = {"censuses": len(points), "census_median_s": round(cost, 4)}
    if fallback:
        return base | {"status": "left_out", "note": fallback, "kinds": []}
    if support is None or len(points) < 2:
        took = max((p.cost_s for p in points), default=0.0)
        note = (
            f"a census takes {took * 1000:.0f} ms and fewer than 2 fit in {CENSUS_SHARE:.0%} of the step "
            "time: counts were left out and the verdict rests on memory alone"
        )
        return base | {"status": "left_out", "note": note, "kinds": []}
    kinds = [k.to_dict() for k in support.kinds[:12]]
    if support.supports:
        note = support_text(support, points)
        return base | {"status": "supports_leak", "note": note, "kinds": kinds}
    if support.found_nothing:
        note = "no kind of Python-visible object grows: memory growth, if any, is outside them (native memory, a C extension, the allocator)"
        return base | {"status": "found_nothing", "note": note, "kinds": kinds}
    plateaus = [k for k in support.kinds if k.trend.status == "plateau"]
    note = (
        f"{plateaus[0].kind} rose by {plateaus[0].trend.grown:,} and stopped (a bounded cache or a pool)"
        if plateaus
        else "counts rise but do not (yet) support a leak on their own"
    )
    return base | {"status": "plateau" if plateaus else "no_support", "note": note, "kinds": kinds}
