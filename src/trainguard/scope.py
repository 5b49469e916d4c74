"""``scope()``: run code, clean up after it, and report what it left behind.

The Python analog of TF.js's ``tf.tidy``/``startScope``/``dispose``::

    with trainguard.scope(max_rss_growth="200MB") as s:
        model = build(); model.fit(x, y)
        s.keep(model)                      # like tf.tidy's return value: not a survivor
    print(s.report.to_text())

    @trainguard.scope()                    # the return value is kept automatically
    def train(params): ...

On exit the scope runs the cleanups (each switchable): Keras ``clear_session()`` (if Keras is
imported), the release of the traced graphs ``tf.custom_gradient`` pins in TensorFlow's gradient
registry (if TensorFlow is imported), ``jax.clear_caches()`` (if JAX is imported), ``gc.collect()``,
``torch.cuda.empty_cache()`` (if torch has initialised CUDA) and
glibc ``malloc_trim(0)``. Then it measures: this process's RSS before, after and at its peak
(read by a light shared thread, 20 Hz by default, so nested scopes cost one thread), GPU bytes
before and after (framework allocators when loaded, else NVML for this pid), and the objects
created inside that are still alive (a census before and after, excluding ``keep=`` objects and
everything they reference). Limits turn a report into a :class:`~trainguard.exceptions.LeakError`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from trainguard.exceptions import ConfigError, LeakError
from trainguard.probes.census import CensusEntry
from trainguard.units import (
    format_bytes,
    format_bytes_apart,
    format_duration,
    parse_duration,
    parse_size,
    renamed_argument,
)

if TYPE_CHECKING:
    from trainguard.process.watch import Watchdog

__all__ = ["scope", "Scope", "ScopeReport", "Survivor"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Survivor(CensusEntry):
    """A group of objects created inside a scope and still alive after its cleanup.

    The fields are those of a census entry; ``count``/``nbytes`` are the growth of this
    (framework, kind, dtype, shape, device) group between the scope's entry and its exit.
    """


@dataclass(frozen=True, slots=True)
class ScopeReport:
    """What one pass through a scope did to memory. Byte fields are bytes, times seconds.

    ``enter_s`` is what entry cost (a ``gc.collect()`` and the first census), ``census_s`` both
    censuses, ``cleanup_s`` the exit cleanups. ``rss_*`` are this process's resident set size; ``gpu_*_bytes`` come from the loaded
    frameworks' allocators (``gpu_source="allocator"``) or NVML for this pid (``"nvml"``), None
    when neither is there. ``survivors`` is empty when the census was switched off.
    """

    name: str | None
    rss_before_bytes: int
    rss_after_bytes: int
    rss_peak_bytes: int
    gpu_before_bytes: int | None
    gpu_after_bytes: int | None
    gpu_source: str | None
    survivors: tuple[Survivor, ...]
    cleanup_s: float
    cleanup_steps_s: tuple[tuple[str, float], ...]
    census_s: float
    body_s: float
    enter_s: float = 0.0
    raised: bool = False
    limit_violations: tuple[str, ...] = field(default=())
    #: (survivor label, chain of references from a named root), for the largest survivors
    holders: tuple[tuple[str, str], ...] = field(default=())
    #: the C allocator's bytes in use on entry and after the cleanups (None where it has no
    #: statistic trainguard reads: see trainguard.probes.allocator)
    native_before_bytes: int | None = None
    native_after_bytes: int | None = None

    @property
    def native_kept_bytes(self) -> int | None:
        """Bytes in use the C allocator gained across the scope (native memory kept)."""
        if self.native_before_bytes is None or self.native_after_bytes is None:
            return None
        return self.native_after_bytes - self.native_before_bytes

    def _native_words(self) -> str:
        kept = self.native_kept_bytes
        if kept is None:
            return ""
        if kept > 0.5 * max(self.rss_delta_bytes - self.survivor_bytes, 0):
            return (
                f"; the C allocator's bytes in use grew {format_bytes(kept, signed=True)}: native memory kept"
            )
        return (
            f"; the C allocator's bytes in use grew only {format_bytes(kept, signed=True)}: freed memory the "
            "allocator keeps (retention or fragmentation), not native memory kept"
        )

    @property
    def bytes_note(self) -> str:
        """When survivors hold little of what RSS grew: say the rest is outside Python-visible
        objects, rather than print a small or zero byte count as if it were the answer."""
        grew = self.rss_delta_bytes
        if grew <= 1024 * 1024 or self.survivor_bytes >= 0.5 * grew:
            return ""
        if not self.survivors and self.census_s > 0:
            return (
                f"RSS grew {format_bytes(grew, signed=True)} but no counted object created inside "
                "survived (framework tensors and graph objects, numpy arrays): the growth is outside "
                "Python-visible objects (native memory of a framework or C extension, or freed memory "
                "the allocator keeps)" + self._native_words()
            )
        return (
            f"RSS grew {format_bytes(grew, signed=True)} but the survivors hold "
            f"{format_bytes(self.survivor_bytes)}: the rest is outside Python-visible objects "
            "(native memory of a framework or C extension, or freed memory the allocator keeps)"
            + self._native_words()
        )

    @property
    def rss_delta_bytes(self) -> int:
        """RSS after the cleanups minus RSS on entry."""
        return self.rss_after_bytes - self.rss_before_bytes

    @property
    def rss_peak_delta_bytes(self) -> int:
        return self.rss_peak_bytes - self.rss_before_bytes

    @property
    def gpu_delta_bytes(self) -> int | None:
        if self.gpu_before_bytes is None or self.gpu_after_bytes is None:
            return None
        return self.gpu_after_bytes - self.gpu_before_bytes

    @property
    def survivor_bytes(self) -> int:
        return sum(s.nbytes for s in self.survivors)

    @property
    def survivor_count(self) -> int:
        return sum(s.count for s in self.survivors)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form.

        Returns:
            The report's figures and survivors as plain JSON values.
        """
        return {
            "name": self.name,
            "rss_before_bytes": self.rss_before_bytes,
            "rss_after_bytes": self.rss_after_bytes,
            "rss_peak_bytes": self.rss_peak_bytes,
            "rss_delta_bytes": self.rss_delta_bytes,
            "gpu_before_bytes": self.gpu_before_bytes,
            "gpu_after_bytes": self.gpu_after_bytes,
            "gpu_source": self.gpu_source,
            "survivors": [s.to_dict() for s in self.survivors],
            "survivor_bytes": self.survivor_bytes,
            "cleanup_s": self.cleanup_s,
            "cleanup_steps_s": dict(self.cleanup_steps_s),
            "census_s": self.census_s,
            "body_s": self.body_s,
            "enter_s": self.enter_s,
            "raised": self.raised,
            "limit_violations": list(self.limit_violations),
            "bytes_note": self.bytes_note,
            "holders": dict(self.holders),
            "native_before_bytes": self.native_before_bytes,
            "native_after_bytes": self.native_after_bytes,
            "native_kept_bytes": self.native_kept_bytes,
        }

    def to_text(self, limit: int = 15) -> str:
        """A few readable lines: memory, GPU, survivors, cleanup.

        Args:
            limit: the most survivor groups listed (the largest first).

        Returns:
            The report as text, one finding a line.
        """
        title = f"scope {self.name!r}" if self.name else "scope"
        lines = [
            f"{title}: RSS {format_bytes(self.rss_before_bytes)} -> {format_bytes(self.rss_after_bytes)} "
            f"({format_bytes(self.rss_delta_bytes, signed=True)}), peak {format_bytes(self.rss_peak_bytes)} "
            f"({format_bytes(self.rss_peak_delta_bytes, signed=True)}); body {format_duration(self.body_s)}",
        ]
        if self.gpu_before_bytes is not None or self.gpu_after_bytes is not None:
            lines.append(
                f"  GPU ({self.gpu_source}): {format_bytes(self.gpu_before_bytes)} -> "
                f"{format_bytes(self.gpu_after_bytes)} ({format_bytes(self.gpu_delta_bytes, signed=True)})"
            )
        steps = ", ".join(f"{k} {format_duration(v)}" for k, v in self.cleanup_steps_s) or "none"
        lines.append(
            f"  cleanup {format_duration(self.cleanup_s)} ({steps}); census {format_duration(self.census_s)}"
        )
        if self.survivors:
            held = format_bytes(self.survivor_bytes) if self.survivor_bytes else "no Python-visible bytes"
            lines.append(
                f"  survivors: {self.survivor_count} objects, {held} (created inside, alive after cleanup):"
            )
            if self.bytes_note:
                lines.append(f"  {self.bytes_note}")
            for s in self.survivors[:limit]:
                size = format_bytes(s.nbytes) if s.nbytes else "native"
                lines.append(f"    {s.count:>7} x {s.describe():<55} {size:>10}")
                holder = dict(self.holders).get(s.describe())
                if holder:
                    lines.append(f"              held by: {holder}")
            if len(self.survivors) > limit:
                rest = self.survivors[limit:]
                lines.append(
                    f"    {sum(s.count for s in rest):>7} x ({len(rest)} more groups) "
                    f"{format_bytes(sum(s.nbytes for s in rest))}"
                )
        else:
            lines.append("  survivors: none")
            if self.bytes_note:
                lines.append(f"  {self.bytes_note}")
        for v in self.limit_violations:
            lines.append(f"  LIMIT: {v}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


# ------------------------------------------------------------------------------------------------
# RSS and its peak


def _rss_bytes() -> int:
    from trainguard.process import statm_rss_bytes

    value = statm_rss_bytes(os.getpid())
    if value is None:
        import psutil

        value = psutil.Process().memory_info().rss
    return int(value)


class _PeakWatcher:
    """One thread for all active scopes: reads RSS every ``interval_s`` and raises each active
    scope's peak. Started with the first scope, stopped with the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peaks: dict[int, int] = {}
        self._intervals: dict[int, float] = {}
        self._next_token = 0
        self._thread: Watchdog | None = None

    def register(self, initial: int, interval_s: float) -> int:
        with self._lock:
            token = self._next_token
            self._next_token += 1
            self._peaks[token] = initial
            self._intervals[token] = interval_s
            if self._thread is None:
                from trainguard.process.watch import Watchdog

                self._thread = Watchdog(
                    self._tick,
                    self._interval_s,
                    name="trainguard-scope-peak",
                    what="the scope's peak watcher",
                ).start()
            return token

    def observe(self, value: int) -> None:
        with self._lock:
            for token, peak in self._peaks.items():
                if value > peak:
                    self._peaks[token] = value

    def release(self, token: int) -> int:
        with self._lock:
            peak = self._peaks.pop(token)
            self._intervals.pop(token, None)
            if not self._peaks and self._thread is not None:
                self._thread.stop(timeout_s=0)  # its last tick may still run; it only raises peaks
                self._thread = None
            return peak

    def _interval_s(self) -> float:
        # read without the lock: register() builds the watchdog while holding it
        intervals = tuple(self._intervals.values())
        return min(intervals, default=0.05)

    def _tick(self) -> None:
        """One watchdog pass: read this process's RSS, raise every active scope's peak."""
        self.observe(_rss_bytes())


_WATCHER = _PeakWatcher()


def _gpu_bytes() -> tuple[int | None, str | None]:
    from trainguard import frameworks

    try:
        allocated = frameworks.gpu_allocated_bytes()
    except Exception as err:
        logger.debug("allocator stats failed: %s", err)
        allocated = None
    if allocated is not None:
        return allocated, "allocator"
    from trainguard.probes import nvml

    if "pynvml" in sys.modules or _nvml_wanted():
        usage = nvml.gpu_memory_by_pid()
        if usage is not None:
            return int(usage.get(os.getpid(), 0)), "nvml"
    return None, None


def _nvml_wanted() -> bool:
    # Asking NVML costs an import and an init the first time; on a machine with no NVIDIA driver
    # there is nothing to ask. The driver exposes this file when it is loaded.
    return os.path.exists("/proc/driver/nvidia/version")


# ------------------------------------------------------------------------------------------------
# keep= validation

_REJECTED_KEEP = (str, bytes, bytearray, int, float, complex, bool)


def _validate_keep(keep: object, *, path: str = "keep") -> None:
    import types

    if keep is None:
        return
    if isinstance(keep, _REJECTED_KEEP) or isinstance(
        keep, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    ):
        raise ConfigError(
            f"{path}= takes the objects to keep (tensors, arrays, models, or a list/tuple/dict of them), "
            f"not {type(keep).__name__} {keep!r:.40}: pass the object itself, e.g. keep=model",
            value=repr(keep)[:80],
        )
    if isinstance(keep, dict):
        for k, v in keep.items():
            _validate_keep(v, path=f"{path}[{k!r}]")
    elif isinstance(keep, (list, tuple, set, frozenset)):
        for i, v in enumerate(keep):
            _validate_keep(v, path=f"{path}[{i}]")


# ------------------------------------------------------------------------------------------------
# the scope


@dataclass(slots=True)
class _Frame:
    name: str | None
    token: int
    rss_before: int
    gpu_before: int | None
    gpu_source: str | None
    census_before: Any
    census_s: float
    kept: list[Any]
    started: float
    enter_s: float
    ids_before: frozenset[int] = frozenset()
    native_before: int | None = None


_ALLOCATOR: list[Any] = []


def _native_bytes() -> int | None:
    """The C allocator's bytes in use (one probe per process, bound on first use)."""
    if not _ALLOCATOR:
        from trainguard.probes.allocator import AllocatorProbe

        _ALLOCATOR.append(AllocatorProbe())
    value: int | None = _ALLOCATOR[0].read()
    return value


def _both(first: Callable[[Any], Any], second: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda o: bool(first(o)) and second(o)


def _survivor_holders(
    survivors: tuple[Survivor, ...], ids_before: frozenset[int], top: int = 3
) -> tuple[tuple[str, str], ...]:
    """Who holds the largest survivors: a chain of references from a named root to an object of
    each kind that was not alive on entry (see :mod:`trainguard.leaks.holders`)."""
    import gc

    from trainguard.leaks.holders import holder_chains, kind_predicate

    def new(o: Any) -> bool:
        return not gc.is_tracked(o) or id(o) not in ids_before

    predicates: dict[str, Callable[[Any], bool]] = {}
    for s in survivors[:top]:
        label = s.describe()
        test = kind_predicate(
            label if s.dtype is not None or s.shape is not None else f"{s.framework}.{s.kind}"
        )
        if test is not None:
            predicates[label] = _both(test, new)
    if not predicates:
        return ()
    try:
        chains = holder_chains(predicates, max_seconds=2.0)
    except Exception:  # naming holders must never break the scope
        return ()
    return tuple((label, chains[label]) for label in predicates if label in chains)


class Scope:
    """A scope that cleans up after the code inside it and reports what survived.

    Use as ``with trainguard.scope() as s: ...`` (then ``s.report``) or as a decorator
    ``@trainguard.scope()`` (the return value is kept; ``func.scope.report`` after a call).
    Scopes nest; each reports its own pass.

    Args:
        keep: objects that may outlive the scope without being survivors (a tensor, model, array,
            or a list/tuple/dict of them); everything they reference is kept too (a Keras model's
            variables). Objects created inside can be added with ``s.keep(obj)``.
        name: a label for the report.
        cleanup: False switches every cleanup step off.
        keras_clear_session: run ``keras.backend.clear_session()`` on exit (if Keras is imported).
        tf_custom_gradients: on exit, move the gradient functions ``tf.custom_gradient`` registered
            while tracing out of TensorFlow's global registry onto their graphs, so that the
            graphs of finished fits are freed (the growth of Keras ``fit`` on TensorFlow); a graph
            still in use keeps its gradient.
        jax_clear_caches: run ``jax.clear_caches()`` on exit (if JAX is imported): the compiled
            train steps of Keras models on the JAX backend.
        gc_collect: run ``gc.collect()`` on exit.
        empty_cuda_cache: run ``torch.cuda.empty_cache()`` on exit (if torch has initialised CUDA).
        malloc_trim: run glibc ``malloc_trim(0)`` on exit.
        census: take a census on entry and exit to name survivors (about 0.1-0.5 s each on a
            large heap; switch off in tight loops that only need RSS). With ``gc_collect`` on,
            entry also runs ``gc.collect()`` so that garbage freed by the exit cleanup does not
            hide new survivors.
        frameworks: census only these (``torch``, ``tensorflow``, ``keras``, ``jax``, ``numpy``);
            None: every framework already imported, and numpy.
        max_survivor_bytes: raise LeakError when survivors hold more ("50MB", or bytes).
        max_rss_growth: raise LeakError when RSS after cleanup exceeds RSS on entry by more
            ("200MB", or bytes).
        peak_interval: how often the shared peak thread reads RSS (a duration such as ``"50ms"``
            or seconds; default 50 ms).
        peak_interval_s: the deprecated older name of ``peak_interval`` (warns).

    Raises:
        ConfigError: a wrong ``keep=`` type, a bad size string, an unknown framework name.
        LeakError: on exit, when a limit is exceeded (not when the body itself raised).
    """

    def __init__(
        self,
        *,
        keep: object = None,
        name: str | None = None,
        cleanup: bool = True,
        keras_clear_session: bool = True,
        tf_custom_gradients: bool = True,
        jax_clear_caches: bool = True,
        gc_collect: bool = True,
        empty_cuda_cache: bool = True,
        malloc_trim: bool = True,
        census: bool = True,
        frameworks: Iterable[str] | None = None,
        max_survivor_bytes: int | str | None = None,
        max_rss_growth: int | str | None = None,
        peak_interval: float | str | None = None,
        peak_interval_s: float | str | None = None,
    ) -> None:
        from trainguard.frameworks import validate_names

        _validate_keep(keep)
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"name={name!r} must be a string such as 'fold-3'")
        if frameworks is not None:
            frameworks = validate_names(frameworks, extra=("numpy",))
        for flag_name, flag in (
            ("cleanup", cleanup),
            ("keras_clear_session", keras_clear_session),
            ("tf_custom_gradients", tf_custom_gradients),
            ("jax_clear_caches", jax_clear_caches),
            ("gc_collect", gc_collect),
            ("empty_cuda_cache", empty_cuda_cache),
            ("malloc_trim", malloc_trim),
            ("census", census),
        ):
            if not isinstance(flag, bool):
                raise ConfigError(f"{flag_name}={flag!r} must be True or False")
        self.keep_objects = keep
        self.name = name
        self.cleanup_steps = {
            "keras_clear_session": cleanup and keras_clear_session,
            "tf_custom_gradients": cleanup and tf_custom_gradients,
            "jax_clear_caches": cleanup and jax_clear_caches,
            "gc_collect": cleanup and gc_collect,
            "empty_cuda_cache": cleanup and empty_cuda_cache,
            "malloc_trim": cleanup and malloc_trim,
        }
        self.census_enabled = census
        self.frameworks = frameworks
        self.max_survivor_bytes = parse_size(max_survivor_bytes, name="max_survivor_bytes", allow_none=True)
        self.max_rss_growth_bytes = parse_size(max_rss_growth, name="max_rss_growth", allow_none=True)
        peak_interval = renamed_argument(
            "peak_interval", peak_interval, "peak_interval_s", peak_interval_s, 0.05
        )
        interval = parse_duration(peak_interval, name="peak_interval")
        if not interval or interval <= 0:
            raise ConfigError(f"peak_interval={peak_interval!r} must be positive, such as 0.05 or '50ms'")
        self.peak_interval_s = float(interval)
        self._local = threading.local()
        self._report: ScopeReport | None = None

    # public ----------------------------------------------------------------------------------

    @property
    def report(self) -> ScopeReport:
        """The report of the last completed pass.

        Raises:
            ConfigError: the scope has not finished a pass yet (read it after the ``with`` block).
        """
        if self._report is None:
            raise ConfigError(
                "scope report is not ready: read s.report after the with-block (or the call) ends"
            )
        return self._report

    def keep(self, *objects: Any) -> Any:
        """Mark objects created inside the active scope as kept (not survivors). Returns the object
        (or the tuple, for several), so ``model = s.keep(build())`` works.

        Raises:
            ConfigError: no active scope in this thread, or an object of the wrong type.

        Args:
            *objects: the objects to keep (a model, tensors, containers of them).

        Returns:
            The object, or the tuple of objects when several were given.
        """
        frames = self._frames()
        if not frames:
            raise ConfigError("s.keep() must be called inside the with-block of this scope")
        for obj in objects:
            _validate_keep(obj)
        frames[-1].kept.extend(objects)
        return objects[0] if len(objects) == 1 else objects

    def __enter__(self) -> Scope:
        self._frames().append(self._open())
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        frame = self._frames().pop()
        report = self._close(frame, raised=exc_type is not None)
        if exc_type is None:
            self._enforce(report)

    def __call__(self, func: F) -> F:
        """Use as a decorator: every call runs inside the scope; the return value is kept."""
        if not callable(func):
            raise ConfigError(f"scope() decorates a function, not {type(func).__name__}")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            frames = self._frames()
            frames.append(self._open())
            try:
                result = func(*args, **kwargs)
            except BaseException:
                report_frame = frames.pop()
                self._close(report_frame, raised=True)
                raise
            frame = frames.pop()
            frame.kept.append(result)
            report = self._close(frame, raised=False)
            self._enforce(report)
            return result

        wrapper.scope = self  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    # internals -------------------------------------------------------------------------------

    def _frames(self) -> list[_Frame]:
        frames = getattr(self._local, "frames", None)
        if frames is None:
            frames = self._local.frames = []
        return frames

    def _open(self) -> _Frame:
        census_before = None
        census_s = 0.0
        enter_start = time.perf_counter()
        if self.census_enabled and self.cleanup_steps["gc_collect"]:
            # Garbage alive at entry would be freed by the exit cleanup and hide as many new
            # survivors of the same kind from the census difference: collect it first.
            import gc

            gc.collect()
        if self.census_enabled:
            from trainguard.probes.census import census

            start = time.perf_counter()
            census_before = census(
                frameworks=self.frameworks,
                exclude=[self.keep_objects] if self.keep_objects is not None else None,
            )
            census_s = time.perf_counter() - start
        gpu_before, gpu_source = _gpu_bytes()
        ids_before: frozenset[int] = frozenset()
        if self.census_enabled:
            import gc

            ids_before = frozenset(map(id, gc.get_objects()))
        rss_before = _rss_bytes()
        native_before = _native_bytes()
        token = _WATCHER.register(rss_before, self.peak_interval_s)
        return _Frame(
            name=self.name,
            token=token,
            rss_before=rss_before,
            gpu_before=gpu_before,
            gpu_source=gpu_source,
            census_before=census_before,
            census_s=census_s,
            kept=[],
            started=time.perf_counter(),
            enter_s=time.perf_counter() - enter_start,
            ids_before=ids_before,
            native_before=native_before,
        )

    def _close(self, frame: _Frame, *, raised: bool) -> ScopeReport:
        body_s = time.perf_counter() - frame.started
        try:
            _WATCHER.observe(_rss_bytes())  # the body's last moment, before cleanup frees anything
        finally:
            peak = _WATCHER.release(frame.token)
        from trainguard import frameworks

        start = time.perf_counter()
        steps = frameworks.cleanup(**self.cleanup_steps)
        cleanup_s = time.perf_counter() - start
        rss_after = _rss_bytes()
        native_after = _native_bytes()
        gpu_after, gpu_source = _gpu_bytes()
        survivors: tuple[Survivor, ...] = ()
        holders: tuple[tuple[str, str], ...] = ()
        census_s = frame.census_s
        if self.census_enabled and frame.census_before is not None:
            from trainguard.probes.census import census

            kept = list(frame.kept)
            if self.keep_objects is not None:
                kept.append(self.keep_objects)
            start = time.perf_counter()
            after = census(frameworks=self.frameworks, exclude=kept or None)
            census_s += time.perf_counter() - start
            survivors = tuple(
                Survivor(e.framework, e.kind, e.dtype, e.shape, e.device, e.count, e.nbytes)
                for e in after.diff(frame.census_before)
            )
            holders = _survivor_holders(survivors, frame.ids_before)
        violations: list[str] = []
        report = ScopeReport(
            name=frame.name,
            rss_before_bytes=frame.rss_before,
            rss_after_bytes=rss_after,
            rss_peak_bytes=max(peak, rss_after),
            gpu_before_bytes=frame.gpu_before,
            gpu_after_bytes=gpu_after,
            gpu_source=gpu_source or frame.gpu_source,
            survivors=survivors,
            cleanup_s=cleanup_s,
            cleanup_steps_s=tuple(steps.items()),
            census_s=census_s,
            body_s=body_s,
            enter_s=frame.enter_s,
            raised=raised,
            holders=holders,
            native_before_bytes=frame.native_before,
            native_after_bytes=native_after,
        )
        if self.max_survivor_bytes is not None and report.survivor_bytes > self.max_survivor_bytes:
            violations.append(
                "survivors hold {} > max_survivor_bytes {}: free or keep= them, or raise the limit".format(
                    *format_bytes_apart(report.survivor_bytes, self.max_survivor_bytes)
                )
            )
        if self.max_rss_growth_bytes is not None and report.rss_delta_bytes > self.max_rss_growth_bytes:
            violations.append(
                "RSS grew {} > max_rss_growth {}: see the survivors above, run each trial in a "
                "recycled worker (trainguard run), or raise the limit".format(
                    *format_bytes_apart(report.rss_delta_bytes, self.max_rss_growth_bytes)
                )
            )
        if violations:
            report = _replace(report, limit_violations=tuple(violations))
        self._report = report
        logger.debug("%s", report.to_text())
        return report

    def _enforce(self, report: ScopeReport) -> None:
        if report.limit_violations:
            raise LeakError(
                "scope exceeded its limits: " + "; ".join(report.limit_violations) + "\n" + report.to_text(),
                report=report,
            )


#: What users write: ``with trainguard.scope(): ...`` or ``@trainguard.scope()``; the class under a
#: function's name, so that its 12 options are written (and documented) once.
scope = Scope


def _replace(report: ScopeReport, **changes: Any) -> ScopeReport:
    import dataclasses

    return dataclasses.replace(report, **changes)
