"""Census of live framework objects: the Python counterpart of TF.js's ``tf.memory()``.

One pass over :func:`gc.get_objects` counts, by framework and kind:

* torch ``Tensor`` and ``Parameter`` (and other ``torch.Tensor`` subclasses by class name), grouped
  by (dtype, device, shape). Bytes are counted once per storage: views and tensors sharing a
  storage (``x[1:]``, ``x.detach()``) add to the count but not to the bytes. A tensor's bytes are
  its ``nbytes`` (numel x element size), not its storage's capacity; a storage seen only through
  views is counted at the size of the first view. torch tensors are GC
  tracked, so ``gc.get_objects`` sees every one that Python code can reach.
* TensorFlow ``EagerTensor`` and ``Variable`` (every ``tf.Variable`` subclass), with their bytes.
  Resource handles (dtype ``resource``/``variant``) are skipped: they belong to a variable.
* Keras 3 ``Variable`` (counted, bytes 0: the backend's tensor under it carries the bytes),
  and, as graph objects, ``KerasTensor``, ``Model`` and ``Layer`` instances.
* JAX ``Array`` (concrete ``ArrayImpl`` buffers) with their bytes.
* numpy ``ndarray``. numpy arrays are **not** GC tracked (they hold no Python references), so
  ``gc.get_objects`` never returns them: they are found among the referents of tracked objects
  (``gc.get_referents``) and of the local variables of every running frame (a running frame
  hides its locals from the GC; see ``stack_locals``), descending through untracked tuples/dicts (which CPython untracks when
  they hold only untracked objects) and along each array's ``.base`` chain. A view's bytes are
  attributed to the array that owns the memory, counted once: kind ``ndarray`` is an owning array
  (with the dtype/shape of the owner); kind ``buffer_view`` is an array over memory that is not a
  numpy array's (``bytes``, ``mmap``, ``np.frombuffer``, a framework's ``.numpy()``), its bytes
  counted once per underlying buffer. Arrays reachable only from C code that does not expose its
  references to the GC (e.g. the ndarray under ``torch.from_numpy``) are not seen.
* Graph objects, counted by type name with 0 bytes: TensorFlow ``Operation``, ``SymbolicTensor``,
  ``Graph``, ``FuncGraph``, ``ConcreteFunction``, ``Function``, ``AtomicFunction`` (a repeated
  Keras ``fit`` on TF leaves about 1,000 ``Operation`` and ``SymbolicTensor`` objects each time);
  torch ``nn.Module`` instances (kind ``Module``); Keras ``Model``/``Layer``/``KerasTensor``.

Frameworks are never imported: a framework not in ``sys.modules`` has no live objects to count.
Types are classified once per census (a per-call cache), so a census costs one dict lookup per
live object plus the per-tensor reads; see bench/census_speed.py for figures.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress
from operator import not_
from typing import Any

__all__ = ["CensusEntry", "Census", "census", "reachable_ids", "CENSUS_FRAMEWORKS", "format_entries"]

#: Names accepted by ``census(frameworks=...)``.
CENSUS_FRAMEWORKS: tuple[str, ...] = ("torch", "tensorflow", "keras", "jax", "numpy")

_TF_GRAPH_KINDS = frozenset(
    {"Operation", "SymbolicTensor", "Graph", "FuncGraph", "ConcreteFunction", "Function", "AtomicFunction"}
)
_TF_SKIP_DTYPES = frozenset({"resource", "variant"})

EntryKey = tuple[str, str, "str | None", "tuple[int, ...] | None", "str | None"]


@dataclass(frozen=True, slots=True)
class CensusEntry:
    """Live objects of one (framework, kind, dtype, shape, device) group.

    ``shape``, ``dtype`` and ``device`` are None for graph objects, whose ``nbytes`` is 0.
    """

    framework: str
    kind: str
    dtype: str | None
    shape: tuple[int, ...] | None
    device: str | None
    count: int
    nbytes: int

    @property
    def key(self) -> EntryKey:
        return (self.framework, self.kind, self.dtype, self.shape, self.device)

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape) if self.shape is not None else None,
            "device": self.device,
            "count": self.count,
            "nbytes": self.nbytes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CensusEntry:
        shape = data.get("shape")
        return cls(
            framework=data["framework"],
            kind=data["kind"],
            dtype=data.get("dtype"),
            shape=tuple(shape) if shape is not None else None,
            device=data.get("device"),
            count=int(data["count"]),
            nbytes=int(data["nbytes"]),
        )

    def describe(self) -> str:
        """``torch Tensor float32[1000, 10] cpu``: one readable label."""
        parts = [self.framework, self.kind]
        if self.dtype is not None or self.shape is not None:
            shape = "" if self.shape is None else "[" + ", ".join(str(d) for d in self.shape) + "]"
            parts.append(f"{self.dtype or ''}{shape}")
        if self.device:
            parts.append(self.device)
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Census:
    """The result of :func:`census`: entries sorted by bytes then count, largest first."""

    entries: tuple[CensusEntry, ...]
    elapsed_s: float

    @property
    def total_count(self) -> int:
        return sum(e.count for e in self.entries)

    @property
    def total_nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """``{"tensorflow.Operation": (count, nbytes), ...}`` summed over dtypes, shapes and devices.

        Returns:
            ``(count, nbytes)`` per kind.
        """
        out: dict[str, tuple[int, int]] = {}
        for e in self.entries:
            name = f"{e.framework}.{e.kind}"
            count, nbytes = out.get(name, (0, 0))
            out[name] = (count + e.count, nbytes + e.nbytes)
        return out

    def diff(self, before: Census) -> tuple[CensusEntry, ...]:
        """Entries that grew since ``before``; their ``count``/``nbytes`` are the growth (>= 0),
        sorted by grown bytes then grown count, largest first.

        Args:
            before: an earlier census of the same process.

        Returns:
            The grown entries, largest first.
        """
        old = {e.key: e for e in before.entries}
        grown: list[CensusEntry] = []
        for e in self.entries:
            prev = old.get(e.key)
            dc = e.count - (prev.count if prev else 0)
            db = e.nbytes - (prev.nbytes if prev else 0)
            if dc > 0 or db > 0:
                grown.append(
                    CensusEntry(e.framework, e.kind, e.dtype, e.shape, e.device, max(dc, 0), max(db, 0))
                )
        grown.sort(key=lambda g: (-g.nbytes, -g.count, g.framework, g.kind))
        return tuple(grown)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for the worker pipe and the store).

        Returns:
            The entries and the census's notes as plain JSON values.
        """
        return {"elapsed_s": self.elapsed_s, "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Census:
        """Rebuild a census from :meth:`to_dict`'s output.

        Args:
            data: the dict, as :meth:`to_dict` made it.

        Returns:
            The census.
        """
        return cls(
            entries=tuple(CensusEntry.from_dict(d) for d in data.get("entries", ())),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
        )

    def to_text(self, limit: int = 20) -> str:
        """The census as text, the largest groups first.

        Args:
            limit: the most groups listed.

        Returns:
            One group a line: framework, kind, dtype, shape, device, count and bytes.
        """
        return format_entries(self.entries, limit=limit)


def format_entries(entries: Iterable[CensusEntry], *, limit: int = 20) -> str:
    """Entries as aligned text lines, ``limit`` at most (the rest summarised in one line)."""
    from trainguard.units import format_bytes

    rows = list(entries)
    lines = [f"{e.count:>8} x {e.describe():<60} {format_bytes(e.nbytes):>10}" for e in rows[:limit]]
    if len(rows) > limit:
        rest = rows[limit:]
        lines.append(
            f"{sum(e.count for e in rest):>8} x ({len(rest)} more groups)"
            f"{'':<44} {format_bytes(sum(e.nbytes for e in rest)):>10}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# classification

_T_TORCH, _T_TF_TENSOR, _T_TF_VAR, _T_KERAS_VAR, _T_JAX, _T_GRAPH, _T_NDARRAY = range(7)


def _type_module(t: type) -> str:
    module = t.__dict__.get("__module__") if hasattr(t, "__dict__") else None
    if not isinstance(module, str):
        module = getattr(t, "__module__", "")
    return module if isinstance(module, str) else ""


class _Classifier:
    """Maps a type to a handler once per census; holds the framework base classes it needs."""

    def __init__(self, frameworks: frozenset[str], numpy: bool, graph_objects: bool) -> None:
        self.graph_objects = graph_objects
        mods = sys.modules
        torch = mods.get("torch") if "torch" in frameworks else None
        self.torch_tensor = getattr(torch, "Tensor", None) if torch else None
        nn = getattr(torch, "nn", None) if torch else None
        self.torch_param = getattr(nn, "Parameter", None) if nn else None
        self.torch_module = getattr(nn, "Module", None) if nn else None
        tf = mods.get("tensorflow") if "tensorflow" in frameworks else None
        self.tf = tf is not None
        self.tf_variable = getattr(tf, "Variable", None) if tf else None
        keras = mods.get("keras") if "keras" in frameworks else None
        self.keras_variable = getattr(keras, "Variable", None) if keras else None
        self.keras_tensor = getattr(keras, "KerasTensor", None) if keras else None
        self.keras_model = getattr(keras, "Model", None) if keras else None
        layers = getattr(keras, "layers", None) if keras else None
        self.keras_layer = getattr(keras, "Layer", None) or (
            getattr(layers, "Layer", None) if layers else None
        )
        jax = mods.get("jax") if "jax" in frameworks else None
        self.jax_array = getattr(jax, "Array", None) if jax else None
        np = mods.get("numpy") if numpy else None
        self.ndarray = getattr(np, "ndarray", None) if np else None
        self.cache: dict[type, tuple[Any, ...] | None] = {}

    def classify(self, t: type) -> tuple[Any, ...] | None:
        try:
            return self._classify(t)
        except Exception:  # exotic metaclasses can make issubclass raise
            return None

    def _classify(self, t: type) -> tuple[Any, ...] | None:
        if self.ndarray is not None and issubclass(t, self.ndarray):
            return (_T_NDARRAY,)
        if self.torch_tensor is not None and issubclass(t, self.torch_tensor):
            if t is self.torch_tensor:
                return (_T_TORCH, "Tensor")
            if self.torch_param is not None and issubclass(t, self.torch_param):
                return (_T_TORCH, "Parameter")
            return (_T_TORCH, t.__name__)
        module = _type_module(t)
        if self.tf and module.startswith("tensorflow"):
            if t.__name__ == "EagerTensor":
                return (_T_TF_TENSOR, "EagerTensor")
            if self.tf_variable is not None and issubclass(t, self.tf_variable):
                return (_T_TF_VAR, "Variable")
            if self.graph_objects and t.__name__ in _TF_GRAPH_KINDS:
                return (_T_GRAPH, "tensorflow", t.__name__)
            return None
        if self.keras_variable is not None and issubclass(t, self.keras_variable):
            return (_T_KERAS_VAR, "Variable")
        if self.graph_objects:
            if self.keras_tensor is not None and issubclass(t, self.keras_tensor):
                return (_T_GRAPH, "keras", "KerasTensor")
            if self.keras_model is not None and issubclass(t, self.keras_model):
                return (_T_GRAPH, "keras", "Model")
            if self.keras_layer is not None and issubclass(t, self.keras_layer):
                return (_T_GRAPH, "keras", "Layer")
            if self.torch_module is not None and issubclass(t, self.torch_module):
                return (_T_GRAPH, "torch", "Module")
        if self.jax_array is not None and t.__name__ == "ArrayImpl" and issubclass(t, self.jax_array):
            return (_T_JAX, "Array")
        return None


def _shape(value: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) if d is not None else -1 for d in value)
    except TypeError:
        return None


def _short_tf_device(device: str) -> str:
    # "/job:localhost/replica:0/task:0/device:CPU:0" -> "CPU:0"
    marker = "device:"
    pos = device.rfind(marker)
    return device[pos + len(marker) :] if pos >= 0 else device


# --------------------------------------------------------------------------------------------
# the census


def census(
    *,
    frameworks: Iterable[str] | None = None,
    numpy: bool = True,
    graph_objects: bool = True,
    exclude: Iterable[object] | None = None,
    stack_locals: bool = True,
    roots: Iterable[object] = (),
) -> Census:
    """Count live framework objects (see the module docstring for what is counted and how).

    Args:
        frameworks: names among ``torch``, ``tensorflow``, ``keras``, ``jax``, ``numpy``; None
            means every one already imported. A named framework that is not imported is skipped
            (it cannot have live objects); it is never imported.
        numpy: count numpy arrays when ``frameworks`` is None (the referents pass, the costliest
            part on large heaps). With an explicit list, numpy is counted only if listed.
        graph_objects: count graph objects (TF operations and functions, Keras models and layers,
            torch modules).
        exclude: objects left out of the count, with everything they reference (see
            :func:`reachable_ids`), as ``scope(keep=...)`` does.
        stack_locals: also look for numpy arrays in the local variables of running functions
            (every thread's stack). Running frames hide their locals from the GC; reading them
            means ``frame.f_locals``, which before Python 3.13 stores a snapshot on the frame like
            ``locals()`` does. False skips them (arrays held only in locals are then not seen).
        roots: more objects whose referents are searched for numpy arrays: containers that
            ``gc.get_objects()`` does not list (frozen with ``gc.freeze()``, or untracked dicts).

    Returns:
        A :class:`Census`.

    Raises:
        ConfigError: an unknown framework name, or ``frameworks`` given as a bare string.
    """
    if frameworks is None:
        names = frozenset(n for n in CENSUS_FRAMEWORKS if n in sys.modules)
    else:
        from trainguard.frameworks import validate_names

        names = frozenset(validate_names(frameworks, extra=("numpy",)))
        # an explicit list is a selection: numpy is counted only when it is listed
        numpy = "numpy" in names
    exclude_ids = reachable_ids(exclude) if exclude is not None else frozenset()
    start = time.perf_counter()
    entries = _run_census(names, numpy, graph_objects, exclude_ids, stack_locals, list(roots))
    return Census(entries=entries, elapsed_s=time.perf_counter() - start)


def _run_census(
    names: frozenset[str],
    numpy: bool,
    graph_objects: bool,
    exclude_ids: frozenset[int],
    stack_locals: bool,
    extra_roots: list[Any],
) -> tuple[CensusEntry, ...]:
    clf = _Classifier(names, numpy, graph_objects)
    cache = clf.cache
    classify = clf.classify
    torch_tensors: list[tuple[str, Any]] = []
    tf_objects: list[tuple[int, Any]] = []
    jax_arrays: list[Any] = []
    keras_vars: list[Any] = []
    graph_counts: dict[tuple[str, str], int] = {}
    ndarrays: dict[int, Any] = {}
    handler: Any  # a classification, None (not counted) or 0 (not classified yet)
    objects = gc.get_objects()
    # The census allocates many small containers; letting the collector run in the middle would
    # traverse the whole heap again (a 100k-tensor heap doubled the census time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for obj in objects:
            t = type(obj)
            handler = cache.get(t, 0)
            if handler == 0:
                handler = cache[t] = classify(t)
            if handler is None:
                continue
            if exclude_ids and id(obj) in exclude_ids:
                continue
            code = handler[0]
            if code == _T_TORCH:
                torch_tensors.append((handler[1], obj))
            elif code == _T_GRAPH:
                key = (handler[1], handler[2])
                graph_counts[key] = graph_counts.get(key, 0) + 1
            elif code == _T_TF_TENSOR or code == _T_TF_VAR:
                tf_objects.append((code, obj))
            elif code == _T_KERAS_VAR:
                keras_vars.append(obj)
            elif code == _T_JAX:
                jax_arrays.append(obj)
            elif code == _T_NDARRAY:
                ndarrays[id(obj)] = obj
        if clf.ndarray is not None:
            roots = objects + extra_roots + (_stack_locals() if stack_locals else [])
            _find_ndarrays(roots, clf.ndarray, ndarrays, exclude_ids)
            del roots
        del objects
        acc: dict[EntryKey, list[int]] = {}
        _count_torch(torch_tensors, acc)
        _count_tf(tf_objects, acc)
        _count_keras(keras_vars, acc)
        _count_jax(jax_arrays, acc)
        _count_ndarrays(ndarrays, clf.ndarray, acc)
    finally:
        if gc_was_enabled:
            gc.enable()
    for (framework, kind), count in graph_counts.items():
        acc[(framework, kind, None, None, None)] = [count, 0]
    entries = [CensusEntry(k[0], k[1], k[2], k[3], k[4], v[0], v[1]) for k, v in acc.items()]
    entries.sort(key=lambda e: (-e.nbytes, -e.count, e.framework, e.kind, str(e.dtype), str(e.shape)))
    return tuple(entries)


def _add(acc: dict[Any, list[int]], key: Any, nbytes: int) -> None:
    slot = acc.get(key)
    if slot is None:
        acc[key] = [1, nbytes]
    else:
        slot[0] += 1
        slot[1] += nbytes


def _count_torch(tensors: list[tuple[str, Any]], acc: dict[EntryKey, list[int]]) -> None:
    if not tensors:
        return
    seen_storage: set[tuple[Any, int]] = set()
    raw: dict[tuple[Any, ...], list[int]] = {}
    views: list[tuple[str, Any]] = []

    def storage_bytes(t: Any) -> int:
        # The storage's start is data_ptr() - storage_offset() * element_size(); reading it this
        # way avoids untyped_storage(), which builds a Python object per tensor (3x slower).
        try:
            ptr = t.data_ptr()
            nbytes = int(t.nbytes)
            if not ptr:  # meta tensors and empty tensors hold no memory
                return 0
            start = ptr - t.storage_offset() * t.element_size()
        except Exception:  # sparse, nested or otherwise storage-less tensors
            try:
                return int(t.numel() * t.element_size())
            except Exception:
                return 0
        key = (t.device, start)
        if key in seen_storage:
            return 0
        seen_storage.add(key)
        return nbytes

    # Non-views first, so a storage's bytes go to its base tensor rather than to a view of it.
    for pass_items, is_first in ((tensors, True), (views, False)):
        for kind, t in pass_items:
            try:
                if is_first and t._is_view():
                    views.append((kind, t))
                    continue
                key = (kind, t.dtype, t.device, t.shape)
            except Exception:
                continue
            _add(raw, key, storage_bytes(t))
    for (kind, dtype, device, shape), (count, nbytes) in raw.items():
        dtype_name = str(dtype).removeprefix("torch.")
        entry_key = ("torch", kind, dtype_name, tuple(int(d) for d in shape), str(device))
        slot = acc.setdefault(entry_key, [0, 0])
        slot[0] += count
        slot[1] += nbytes


def _tf_nbytes(dtype: Any, shape: tuple[int, ...] | None) -> int:
    if shape is None or any(d < 0 for d in shape):
        return 0
    try:
        size = int(dtype.size)
    except Exception:
        return 0
    n = 1
    for d in shape:
        n *= d
    return n * size


def _count_tf(objects: list[tuple[int, Any]], acc: dict[EntryKey, list[int]]) -> None:
    for code, obj in objects:
        try:
            dtype = obj.dtype
            dtype_name = dtype.name
            if code == _T_TF_TENSOR and dtype_name in _TF_SKIP_DTYPES:
                continue
            shape = _shape(obj.shape)
            device = _short_tf_device(str(obj.device))
        except Exception:
            continue
        kind = "EagerTensor" if code == _T_TF_TENSOR else "Variable"
        _add(acc, ("tensorflow", kind, dtype_name, shape, device), _tf_nbytes(dtype, shape))


def _count_keras(variables: list[Any], acc: dict[EntryKey, list[int]]) -> None:
    for var in variables:
        try:
            dtype = str(var.dtype)
            shape = _shape(var.shape)
        except Exception:
            continue
        # bytes 0: the backend tensor inside the Keras variable is counted under its framework
        _add(acc, ("keras", "Variable", dtype, shape, None), 0)


def _count_jax(arrays: list[Any], acc: dict[EntryKey, list[int]]) -> None:
    for arr in arrays:
        try:
            if arr.is_deleted():
                continue
            devices = sorted(str(d) for d in arr.devices())
            device = devices[0] if len(devices) == 1 else ",".join(devices)
            _add(acc, ("jax", "Array", str(arr.dtype), _shape(arr.shape), device), int(arr.nbytes))
        except Exception:
            continue


def _stack_locals() -> list[Any]:
    """The local namespaces of every frame on every thread's stack.

    A running frame does not report its locals to the GC (``gc.get_referents(frame)`` is empty
    while it runs), so arrays held only in local variables are reachable from nothing the GC
    lists. ``frame.f_locals`` exposes them; before Python 3.13 it is a snapshot dict stored on the
    frame (what ``locals()`` returns), which keeps its values referenced until the frame next syncs
    it or returns, exactly as calling ``locals()`` or stopping in a debugger does.
    """
    me = sys._getframe()
    namespaces: list[Any] = []
    for top in sys._current_frames().values():
        frame: types.FrameType | None = top
        while frame is not None:
            if frame is not me:
                try:
                    namespaces.append(frame.f_locals)
                except Exception:  # a frame torn down while we walked
                    pass
            frame = frame.f_back
    return namespaces


def _find_ndarrays(
    objects: list[Any], ndarray: type, found: dict[int, Any], exclude_ids: frozenset[int]
) -> None:
    """Add to ``found`` the arrays referenced by tracked objects (arrays are not GC tracked).

    The filtering runs in C (``map``/``itertools.compress`` over type lookups): a large heap has
    about a million referents and a Python-level loop over them would dominate the census.
    Types are tested with ``issubclass`` on the type, never ``isinstance`` on the object, which
    reads ``__class__`` and lets some lazy module objects emit warnings.
    """
    array_types: set[type] = {ndarray}
    container_types = frozenset({tuple, dict})
    known: set[type] = {ndarray, tuple, dict}
    is_array_type = array_types.__contains__
    is_container_type = container_types.__contains__
    pending: list[list[Any]] = [gc.get_referents(*objects)]
    rounds = 0
    while pending and rounds < 64:
        rounds += 1
        referents = pending.pop()
        types = list(map(type, referents))
        for t in set(types) - known:
            known.add(t)
            try:
                if issubclass(t, ndarray):
                    array_types.add(t)
            except TypeError:
                pass
        # one pass over the referents keeps what is an array or a container (a few percent of
        # them); the split between the two runs over that short list
        interesting = array_types | container_types
        kept = list(compress(referents, map(interesting.__contains__, types)))
        del types
        kept_types = list(map(type, kept))
        arrays = list(compress(kept, map(is_array_type, kept_types)))
        found.update(zip(map(id, arrays), arrays, strict=True))
        containers = list(compress(kept, map(is_container_type, kept_types)))
        # CPython untracks tuples/dicts holding only untracked objects (arrays among them):
        # look inside those; tracked ones are in gc.get_objects() already.
        untracked = list(compress(containers, map(not_, map(gc.is_tracked, containers))))
        if untracked:
            pending.append(gc.get_referents(*untracked))
    if exclude_ids:
        for key in [k for k in found if k in exclude_ids]:
            del found[key]


def _count_ndarrays(found: dict[int, Any], ndarray: type[Any] | None, acc: dict[EntryKey, list[int]]) -> None:
    if not found or ndarray is None:
        return
    counted_roots: set[int] = set()
    # grouped on the raw (hashable) dtype and shape; names are formatted once per group
    raw: dict[tuple[str, Any, tuple[int, ...]], list[int]] = {}
    for arr in list(found.values()):
        # Walk to the object that owns the memory; views count toward the owner, once.
        owner: Any = arr
        base = arr.base
        depth = 0
        while isinstance(base, ndarray) and depth < 64:
            owner = base
            base = base.base
            depth += 1
        if base is None:
            root_id, kind, label, nbytes = id(owner), "ndarray", owner, int(owner.nbytes)
        else:
            root_id, kind, label, nbytes = id(base), "buffer_view", owner, int(owner.nbytes)
        if root_id in counted_roots:
            # Another array over the same memory was counted already.
            continue
        counted_roots.add(root_id)
        if base is None and id(owner) not in found:
            found[id(owner)] = owner  # reached only through a view's .base
        _add(raw, (kind, label.dtype, label.shape), nbytes)
    for (kind, dtype, shape), (count, nbytes) in raw.items():
        key = ("numpy", kind, str(dtype), tuple(int(d) for d in shape), "cpu")
        slot = acc.setdefault(key, [0, 0])
        slot[0] += count
        slot[1] += nbytes


# --------------------------------------------------------------------------------------------
# reachability, for keep= / exclude=

_NO_DESCEND = (type, type(sys), type(len), type(_type_module), type(_type_module.__code__))


_FUNCTION = type(_type_module)


def _function_state(fn: Any) -> list[Any]:
    """What a Python function holds of its own: closure cells, defaults and attributes (not its
    globals or code)."""
    out: list[Any] = [c for c in (fn.__closure__ or ())]
    for extra in (fn.__defaults__, fn.__kwdefaults__, getattr(fn, "__dict__", None)):
        if extra:
            out.append(extra)
    return out


def reachable_ids(objects: Iterable[object] | object, *, limit: int = 1_000_000) -> frozenset[int]:
    """The ids of ``objects`` and of everything they reference, transitively.

    Used to exclude what a caller keeps (a model and its variables, a returned tensor) from a
    census. The walk does not enter classes, modules, functions or code objects, so it does not
    spread through module globals into the whole heap; it stops after ``limit`` objects.
    """
    if isinstance(objects, (list, tuple, set, frozenset)):
        stack = list(objects)
    else:
        stack = [objects]
    seen: set[int] = set()
    torch = sys.modules.get("torch")
    torch_tensor = getattr(torch, "Tensor", None) if torch is not None else None
    while stack and len(seen) < limit:
        obj = stack.pop()
        oid = id(obj)
        if oid in seen:
            continue
        seen.add(oid)
        t = type(obj)
        if t is _FUNCTION:
            # what a kept object's function attributes close over is kept too (a Keras model's
            # train_function holds its traced graphs); the function's module globals are not
            stack.extend(_function_state(obj))
            continue
        if issubclass(t, _NO_DESCEND):
            continue
        try:
            stack.extend(gc.get_referents(obj))
            if torch_tensor is not None and issubclass(t, torch_tensor):
                # a tensor's .grad and a view's ._base live in C++, invisible to get_referents
                for extra in (obj.grad, obj._base):
                    if extra is not None:
                        stack.append(extra)
            elif t.__name__ == "ndarray":
                # numpy views hold their base outside the GC protocol
                base = obj.base
                if base is not None:
                    stack.append(base)
        except Exception:
            continue
    return frozenset(seen)
