"""The measurement loop of :func:`trainguard.leakcheck`: call, collect, trim, read, decide.

Each reading follows ``gc.collect()`` and, on glibc, ``malloc_trim(0)``: the allocator's habit of
keeping freed memory is what makes RSS swing by tens of MB between iterations of a loop that does
not leak (the torch-backend Keras loop swings 421-556 MB before the trim and reads 378 MB after it,
every time). The reading before the trim is kept too: the difference is memory the allocator
retains, reported separately from live memory.

Fast steps are batched: a reading costs a ``gc.collect()`` (milliseconds to tens of ms on a large
heap), so when a step is much faster than that, several calls share one reading and the slope is
still reported per call.

The decisions (batching, the look schedule, the gates before a verdict, each look and the final
verdict) are the pure functions of :mod:`trainguard.leaks._plan`; this module calls the step,
takes the readings and assembles the report.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import logging
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainguard.exceptions import ConfigError
from trainguard.leaks import _evidence, _native, _plan, stats
from trainguard.leaks._loop import LoopBase, StepTimes, analysis_dict, settled_slope
from trainguard.leaks._report import KindGrowth, LeakReport, StepError
from trainguard.leaks.stats import Verdict
from trainguard.units import format_bytes, parse_duration, parse_size

__all__ = [
    "LeakCheckConfig",
    "default_settings",
    "make_config",
    "run_loop",
    "call_plan",
    "METRICS",
    "NOT_SETTINGS",
]

logger = logging.getLogger(__name__)

METRICS = ("auto", "rss", "uss", "pss")


@dataclass(frozen=True, slots=True)
class LeakCheckConfig:
    """Validated settings of one leak check (see :func:`trainguard.leakcheck` for their meaning).

    Each field's default is the check's default, written here only: :func:`trainguard.leakcheck`'s
    keyword arguments take theirs from ``LeakCheckConfig()``, :func:`make_config` fills what it is
    not given from :func:`default_settings`, and the CLI passes only the options a user gave.
    ``max_growth_bytes`` None: :func:`make_config` sets a quarter of the available memory, at most 4 GiB.
    """

    max_iterations: int | None = None
    min_iterations: int | None = None
    max_time_s: float | None = 120.0
    min_calls: int | None = 100
    metric: str = "auto"
    attribution: bool = True
    tracemalloc: bool = False
    tolerance_bytes_per_iter: float | None = None
    alpha: float = 0.01
    trim: bool = True
    calls_per_measurement: int | None = None
    max_measurements: int = 300
    min_measurements: int = 10
    max_growth_bytes: int | None = None
    tracemalloc_full_stack: bool = False
    allocator_evidence: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _positive_int(name: str, value: Any, *, allow_none: bool = False, minimum: int = 1) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(
            f"{name}={value!r} must be a whole number such as {max(minimum, 50)}", value=repr(value)
        )
    if value < minimum:
        raise ConfigError(
            f"{name}={value!r} must be at least {minimum}, e.g. {max(minimum, 50)}", value=int(value)
        )
    return int(value)


#: the arguments of :func:`trainguard.leakcheck` that are not settings of the check
NOT_SETTINGS = frozenset({"step", "setup", "isolated", "progress"})

#: a setting's name where the config's field is named for its validated unit
_FIELD_OF_SETTING = {
    "max_time": "max_time_s",
    "tolerance": "tolerance_bytes_per_iter",
    "max_growth": "max_growth_bytes",
}

#: config fields that no argument sets
_FIXED_FIELDS = frozenset({"min_measurements"})


def default_settings() -> dict[str, Any]:
    """The settings of :func:`trainguard.leakcheck` (its keyword arguments but ``NOT_SETTINGS``) with
    their defaults, read from :class:`LeakCheckConfig`'s fields, the one place they are written."""
    setting_of_field = {f: name for name, f in _FIELD_OF_SETTING.items()}
    return {
        setting_of_field.get(f.name, f.name): f.default
        for f in dataclasses.fields(LeakCheckConfig)
        if f.name not in _FIXED_FIELDS
    }


def make_config(**settings: Any) -> LeakCheckConfig:
    """Validate every setting before any work starts. ``settings`` are keyword arguments of
    :func:`trainguard.leakcheck` (all but step, setup, isolated and progress); what is not given
    takes the default of :class:`LeakCheckConfig`'s field.

    Raises:
        ConfigError: an unknown setting, any value out of range, an unknown metric, no budget at all.
    """
    defaults = default_settings()
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise ConfigError(
            f"unknown leak-check setting {unknown[0]!r}: use one of {', '.join(defaults)}", value=unknown[0]
        )
    s = defaults | settings
    max_iterations, min_iterations, max_time = s["max_iterations"], s["min_iterations"], s["max_time"]
    metric, tolerance, alpha, max_growth = s["metric"], s["tolerance"], s["alpha"], s["max_growth"]
    max_it = _positive_int("max_iterations", max_iterations, allow_none=True)
    min_calls = _positive_int("min_calls", s["min_calls"], allow_none=True)
    min_it = _positive_int("min_iterations", min_iterations, minimum=1, allow_none=True)
    max_time_s = parse_duration(max_time, name="max_time", allow_none=True)
    if max_time_s is not None and max_time_s <= 0:
        raise ConfigError(f"max_time={max_time!r} must be positive, e.g. '5m'", value=max_time)
    if max_it is None and max_time_s is None:
        raise ConfigError(
            "give max_iterations or max_time (or both): a leak check needs a budget, e.g. max_time='5m'"
        )
    if max_it is not None and min_it is not None and min_it > max_it:
        raise ConfigError(
            f"min_iterations={min_it} is above max_iterations={max_it}: lower it or raise max_iterations"
        )
    if not isinstance(metric, str) or metric.lower() not in METRICS:
        raise ConfigError(
            f"metric={metric!r} is unknown: use one of {', '.join(METRICS)}", value=repr(metric)
        )
    tol = None if tolerance in (None, "auto") else float(parse_size(tolerance, name="tolerance"))
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
        raise ConfigError(f"alpha={alpha!r} must be between 0 and 0.5, e.g. 0.01", value=repr(alpha))
    cpm = _positive_int("calls_per_measurement", s["calls_per_measurement"], allow_none=True)
    max_meas = int(_positive_int("max_measurements", s["max_measurements"], minimum=12) or 0)
    if max_growth is None:
        import psutil

        # a fast leaking step would otherwise take the machine down before the time budget ends
        growth_cap = int(min(4 * 1024**3, 0.25 * psutil.virtual_memory().available))
    else:
        growth_cap = parse_size(max_growth, name="max_growth")
        if not growth_cap:
            raise ConfigError(
                f"max_growth={max_growth!r} must be positive, e.g. '2GB'", value=repr(max_growth)
            )
    return LeakCheckConfig(
        max_iterations=max_it,
        min_iterations=min_it,
        max_time_s=max_time_s,
        min_calls=min_calls,
        metric=metric.lower(),
        attribution=bool(s["attribution"]),
        tracemalloc=bool(s["tracemalloc"]),
        tolerance_bytes_per_iter=tol,
        alpha=float(alpha),
        trim=bool(s["trim"]),
        calls_per_measurement=cpm,
        max_measurements=max_meas,
        max_growth_bytes=int(growth_cap),
        tracemalloc_full_stack=bool(s["tracemalloc_full_stack"]),
        allocator_evidence=bool(s["allocator_evidence"]),
    )


def call_plan(step: Callable[..., Any], setup_value: Any, has_setup: bool) -> bool:
    """Whether ``step`` is called with setup's return value. Decided from its signature.

    ``step()`` when it takes no required argument and setup returned None (or there is no setup);
    ``step(value)`` when setup returned something and step accepts one positional argument.

    Raises:
        ConfigError: step needs more than one argument, or needs one and there is nothing to pass.
    """
    if not callable(step):
        raise ConfigError(f"step must be callable, got {type(step).__name__}")
    try:
        sig = inspect.signature(step)
    except (TypeError, ValueError):
        return setup_value is not None
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    required_kw = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    var_pos = any(p.kind == p.VAR_POSITIONAL for p in params)
    name = getattr(step, "__name__", "step")
    if required_kw:
        raise ConfigError(
            f"{name}() requires keyword argument(s) {', '.join(p.name for p in required_kw)}: a step takes no "
            "arguments, or one (what setup returns); wrap it, e.g. `lambda: step(x=1)`"
        )
    if len(required) > 1:
        raise ConfigError(
            f"{name}() requires {len(required)} arguments ({', '.join(p.name for p in required)}): a step takes "
            "no arguments, or one (what setup returns)"
        )
    if len(required) == 1:
        if setup_value is None:
            why = "setup returned None" if has_setup else "there is no setup"
            raise ConfigError(
                f"{name}() requires the argument {required[0].name!r} but {why}: give a setup that returns it, "
                "or give the argument a default"
            )
        return True
    return setup_value is not None and (bool(positional) or var_pos)


class _Meter:
    """Reads the host metric over this process tree, GPU bytes, and the pre-trim value."""

    def __init__(self, metric: str, trim: bool, allocator_evidence: bool = True) -> None:
        from trainguard.frameworks import malloc_trim

        self.metric = metric
        self._trim = trim
        self._malloc_trim = malloc_trim
        self.trim_available = True
        self._pid = os.getpid()
        self._nvml: bool | None = None
        #: metric "auto": the step's process tree has had a child at some reading, so PSS is read too
        self.children_seen = False
        #: the tree had more than one process at some reading (the allocator figure is ours only)
        self.tree_seen = False
        self.native = _native.AllocatorSeries(enabled=allocator_evidence)
        self._pss_readable = True

    def _host(self, *, extra: bool = False) -> tuple[int, tuple[int, ...], int | None]:
        """(the metric's bytes, the tree's pids, PSS of the tree when ``extra`` and metric auto)."""
        from trainguard.process import tree_memory

        if self.metric == "auto":
            # RSS is one statm read; PSS costs a smaps_rollup walk (26 ms for a TensorFlow process
            # with 1,300 mappings), so it is read only once the tree has children: growth that
            # lives in an exec'd child's pages shared with others is split fairly only by PSS (a
            # fork not exec'd yet is charged its private pages in the RSS sum too)
            detail = extra and self.children_seen and self._pss_readable
            tree = tree_memory(self._pid, detail=detail)
            if extra and not self.children_seen and len(tree.pids) > 1 and self._pss_readable:
                self.children_seen = True
                tree = tree_memory(self._pid, detail=True)
            pss = tree.pss_bytes if extra and self.children_seen else None
            if extra and self.children_seen and pss is None:
                self._pss_readable = False
                logger.info("PSS cannot be read here; metric auto stays with RSS")
            return int(tree.rss_bytes), tree.pids, pss
        tree = tree_memory(self._pid, detail=self.metric != "rss")
        value = getattr(tree, f"{self.metric}_bytes")
        if value is None:
            raise ConfigError(
                f"metric={self.metric!r} cannot be read here (needs /proc/PID/smaps_rollup access): use metric='rss'"
            )
        return int(value), tree.pids, None

    def gpu_bytes(self, pids: tuple[int, ...]) -> tuple[int | None, int | None]:
        allocated = None
        try:
            from trainguard.frameworks import gpu_allocated_bytes

            allocated = gpu_allocated_bytes()
        except Exception as err:  # a probe must never end the check
            logger.debug("allocator stats failed: %s", err)
        nvml = None
        if self._nvml is not False:
            try:
                from trainguard.probes.nvml import gpu_memory_of_pids, nvml_available

                if nvml_available():
                    nvml = gpu_memory_of_pids(list(pids))
                    self._nvml = True
                else:
                    self._nvml = False
            except Exception as err:
                logger.debug("NVML failed: %s", err)
                self._nvml = False
        return allocated, nvml

    def read(self, calls_s: float | None = None) -> dict[str, Any]:
        """One reading's row. ``calls_s``: the step time since the last reading, which decides
        whether the heaps' residency is affordable (``_native.AllocatorSeries.read_heaps``)."""
        gc.collect()
        untrimmed = None
        if self._trim and self.trim_available:
            untrimmed, _, _ = self._host()
            self.trim_available = self._malloc_trim()
        value, pids, pss = self._host(extra=True)
        # RSS inside glibc's heaps and outside them: the process's own, so with no children
        alone = len(pids) == 1 and self.metric in ("rss", "auto")
        heaps = self.native.read_heaps(calls_s) if alone else None
        allocated, nvml = self.gpu_bytes(pids)
        self.tree_seen = self.tree_seen or len(pids) > 1
        row: dict[str, Any] = {_native.KEY: self.native.read()}
        if heaps is not None:
            row[_native.HEAP_KEY], row[_native.OUTSIDE_KEY] = heaps
            if row[_native.KEY] is not None:
                row[_native.LIVE_KEY] = row[_native.OUTSIDE_KEY] + row[_native.KEY]
        if self.metric == "auto" and pss is not None:
            row["pss_bytes"] = pss
        return row | {
            "bytes": value,
            "untrimmed_bytes": untrimmed if self.trim_available else None,
            "gpu_allocated_bytes": allocated,
            "gpu_nvml_bytes": nvml,
            "processes": len(pids),
        }


def run_loop(
    step: Callable[..., Any],
    setup: Callable[[], Any] | None,
    config: LeakCheckConfig,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    isolated: bool = False,
    on_reading: Callable[[dict[str, Any]], None] | None = None,
) -> LeakReport:
    """Run the leak check in this process. See :func:`trainguard.leakcheck`.

    ``on_reading`` receives each reading's row as it is taken (the isolated child streams them to
    its parent, which keeps the series when the child dies hard).
    """

    setup_value = setup() if setup is not None else None
    pass_value = call_plan(step, setup_value, setup is not None)
    call = (lambda: step(setup_value)) if pass_value else step

    # Objects alive before the first call cannot be what grows; moving them to the permanent
    # generation makes every later gc.collect() walk only what the iterations created (19 ms ->
    # well under 1 ms in a process with numpy and scipy loaded), which is most of a reading's cost.
    gc.collect()
    watch = _evidence.ContainerWatch() if config.attribution else None
    gc.freeze()
    loop = _Loop(call, config, progress, isolated, on_reading, watch)
    try:
        return loop.run()
    finally:
        gc.unfreeze()
        if loop.counts.watch is not None:
            loop.counts.watch.release()


#: Objects a first call must make for them to join the frozen baseline (see ``_Counts.rebaseline``).
REBASELINE_OBJECTS = 100_000
#: Census points kept at most (thinned by half beyond it, first and last kept).
_MAX_CENSUS_POINTS = 32


class _Counts:
    """The census side of the loop: when to take one (within ``_evidence.CENSUS_SHARE`` of the
    step time), what the counts say at a look, and who holds what grows."""

    def __init__(self, enabled: bool, watch: _evidence.ContainerWatch | None) -> None:
        self.enabled = enabled
        self.watch = watch
        self.points: list[_evidence.CountPoint] = []
        self.cost_s = 0.0
        self.step_time_since = 0.0
        self.steps_seen_s = 0.0
        self.fallback = ""
        self.support: _evidence.CountSupport | None = None
        self.objects_at_last = 0
        self.objects_now = 0
        self.readings_since = 0
        if enabled:
            # imported now, so that the first census's cost (which decides how often the next
            # ones come) is the census and not its imports
            import trainguard.leaks.attribution  # noqa: F401
            import trainguard.probes.census  # noqa: F401

    def maybe_take(
        self,
        iterations: int,
        step_times: StepTimes,
        budget_s: float,
        dense_left_s: float | None = None,
    ) -> float:
        """A census when the step time since the last one pays for it (``CENSUS_SHARE``), or,
        while the loop reads call by call (``dense_left_s``: what that phase's budget has left),
        every ``_plan.dense_census_gap`` readings.
        Its cost is predicted from the last census and the number of live objects now (the heap may
        have grown since); when the budget ``budget_s`` of step time cannot pay for
        ``MIN_CENSUSES`` censuses of that cost, counts are left out for the rest of the check, with
        a note. Returns what the census took (0 when none was taken)."""
        if not self.enabled or self.fallback:
            return 0.0
        self.step_time_since += step_times.total_s - self.steps_seen_s
        self.steps_seen_s = step_times.total_s
        self.readings_since += 1
        if dense_left_s is not None and self.points:
            # reading call by call: censuses spread over the phase's own budget; one it cannot pay
            # for is skipped (the phase ends when its budget is spent). A census too slow for the
            # whole budget falls back as below.
            predicted = self.predicted_cost()
            if budget_s > 0:
                self.fallback = _evidence.census_fallback(predicted, budget_s, **self.taken())
            gap = _plan.dense_census_gap(predicted, budget_s)
            if self.fallback or predicted > dense_left_s or self.readings_since < gap:
                return 0.0
            return self.take(iterations)
        if self.points and self.cost_s > _evidence.CENSUS_SHARE * self.step_time_since:
            return 0.0
        predicted = self.predicted_cost()
        if self.points and budget_s > 0:
            self.fallback = _evidence.census_fallback(predicted, budget_s, **self.taken())
        if self.fallback or (self.points and predicted > _evidence.CENSUS_SHARE * self.step_time_since):
            return 0.0
        return self.take(iterations)

    def rebaseline(self) -> None:
        """After a first call that made ``REBASELINE_OBJECTS`` objects or more (a framework
        imported on first use: TensorFlow and Keras are hundreds of thousands), what it made joins
        the frozen baseline, so that each census walks what later calls made and not the framework
        itself (a Keras census fell from about 1 s to a quarter of that). Containers it made are
        watched from here; earlier censuses, of another baseline, are dropped. A smaller first
        call keeps the baseline from before it: an object it made and later calls change in place
        (``total += loss`` on a tensor) would be frozen out of every census."""
        if not self.enabled or self.watch is None or len(gc.get_objects()) < REBASELINE_OBJECTS:
            return
        self.watch.release()
        gc.unfreeze()  # the watch finds names with gc.get_referrers, blind to the frozen generation
        gc.collect()
        self.watch = _evidence.ContainerWatch()
        gc.freeze()
        self.points.clear()
        self.cost_s = 0.0
        self.objects_at_last = self.objects_now = 0

    def taken(self) -> dict[str, Any]:
        """The censuses so far and what they cost, for ``census_fallback``."""
        return {"taken": len(self.points), "spent_s": sum(p.cost_s for p in self.points)}

    def rising(self) -> bool:
        """Whether reading call by call may still let counts speak (see ``_plan.dense_next``)."""
        return self.enabled and not self.fallback and _evidence.still_rising(self.points)

    def predicted_cost(self) -> float:
        """The last census's cost, scaled by how much the heap grew since (a census walks the
        objects created since the freeze); counting them is a fast C loop."""
        if not self.points:
            return 0.0
        self.objects_now = len(gc.get_objects())
        return max(self.cost_s, self.cost_s * self.objects_now / max(self.objects_at_last, 20_000))

    def take(self, iterations: int) -> float:
        try:
            point = _evidence.take_counts(iterations, self.watch)
        except Exception as err:
            logger.warning("census failed, attribution disabled: %s", err)
            self.enabled = False
            return 0.0
        self.step_time_since = 0.0
        self.readings_since = 0
        self.cost_s = point.cost_s
        self.objects_at_last = self.objects_now or len(gc.get_objects())
        self.objects_now = 0
        self.points.append(point)
        if len(self.points) > _MAX_CENSUS_POINTS:
            # the censuses live in the measured process: an unbounded list of them is itself a
            # slow leak (tens of KB each), which a fast step's readings would see. Keep the first,
            # the last, and every other one between.
            self.points[1:-1] = self.points[1:-1:2]
        return point.cost_s

    def take_final(self, iterations: int, step_time_s: float, elapsed_s: float) -> None:
        """The last census, for what grows; skipped when counts fell back, or when it would cost
        more than the census's share of the step time (with fewer than two censuses so far, what
        grows needs this one: then up to a tenth of the check's time)."""
        if not self.enabled or not self.points or self.points[-1].iteration == iterations:
            return
        allowed = _evidence.CENSUS_SHARE * max(step_time_s, 1.0)
        if len(self.points) < 2:
            allowed = max(allowed, 0.1 * elapsed_s)
        predicted = self.predicted_cost()
        if self.fallback or predicted > allowed:
            return
        if len(self.points) < 2 and step_time_s > 0:
            # the loop never got to weigh a census against the budget (the first one ran before
            # the step built its heap): weigh this one against the step time the check had, and
            # keep it for what grows either way
            self.fallback = _evidence.census_fallback(predicted, step_time_s)
        self.take(iterations)

    def look(self, series: list[dict[str, Any]], alpha: float, key: str) -> bool:
        """Whether counts support a leak at this look (never while falling back)."""
        if not self.enabled or self.fallback:
            return False
        self.support = _evidence.count_support(self.points, series, alpha=alpha, key=key)
        return self.support.supports

    def with_holders(self, growth: tuple[KindGrowth, ...], verdict: Verdict) -> tuple[KindGrowth, ...]:
        """``growth`` with holder chains on what is suspected (``_evidence.suspected_kinds``): a
        clean run whose censuses saw nothing rise walks no heap."""
        only = _evidence.suspected_kinds(growth, self.support, cleared=verdict is Verdict.NO_LEAK)
        return _evidence.attach_holders(growth, self.watch, only=only)

    def finish(self, loop: _Loop, alpha: float, key: str) -> None:
        """A last census, and what all the censuses say together."""
        elapsed = time.perf_counter() - loop.start
        self.take_final(loop.iterations, loop.step_times.total_s, elapsed)
        series = loop.series
        if self.enabled and not self.fallback:
            self.look(series, alpha, key)

    def report(self) -> dict[str, Any] | None:
        if not self.points:
            return None
        return _evidence.evidence_dict(self.support, self.fallback, self.points)


def _row_bytes(row: dict[str, Any]) -> int:
    """A reading's row as the check keeps it: the dict, its values and its slot in the series."""
    return sys.getsizeof(row) + sum(sys.getsizeof(v) for v in row.values()) + 8


class _Loop(LoopBase):
    """One leak check's state and its phases: blocks of calls, readings, calibration, looks, the
    final verdict and the report (what it shares with the Node loop is :class:`LoopBase`'s). The
    decisions themselves are the pure functions of :mod:`trainguard.leaks._plan`."""

    def __init__(
        self,
        call: Callable[[], Any],
        config: LeakCheckConfig,
        progress: Callable[[dict[str, Any]], None] | None,
        isolated: bool,
        on_reading: Callable[[dict[str, Any]], None] | None,
        watch: _evidence.ContainerWatch | None = None,
    ) -> None:
        from trainguard.leaks.attribution import TracemallocProbe

        super().__init__(config, progress, [])
        self.call = call
        self.isolated, self.on_reading = isolated, on_reading
        self.meter = _Meter(config.metric, config.trim, config.allocator_evidence)
        self.probe = (
            TracemallocProbe(full_stack=config.tracemalloc_full_stack) if config.tracemalloc else None
        )
        self.measure_costs: list[float] = []
        self.counts = _Counts(config.attribution, watch)
        self.rebased = False  # whether the first call's objects joined the frozen baseline
        self.native_support: _native.NativeSupport | None = None
        #: the step time summed up to the last reading (what the next reading may spend on heaps)
        self.steps_at_reading_s = 0.0

    # -- calls and readings ------------------------------------------------------------------

    def run(self) -> LeakReport:
        if self.probe is not None:
            self.probe.start()
        self.meter.read()  # first use imports the probes; keep that out of the timed loop
        self.loop()
        return self.report()

    def after_measure(self) -> None:
        if self.plan is None and len(self.series) >= 3:
            self.calibrate()
        if self.dense:
            self.end_dense_if_due()

    def step_errors(self) -> tuple[type[BaseException], ...]:
        """What a step may raise and still get a report (``inconclusive``, the error named): any
        exception, ``sys.exit()``, and in the isolated process a ``KeyboardInterrupt`` the step
        raised itself (a Ctrl-C at the terminal is handled by the parent, which stops the check)."""
        if self.isolated:
            return (Exception, SystemExit, KeyboardInterrupt)
        return (Exception, SystemExit)

    def call_block(self) -> bool:
        """Call the step ``k`` times; False when it raised (the error is kept)."""
        for _ in range(self.block_size()):
            t0 = time.perf_counter()
            try:
                self.call()
            except self.step_errors() as exc:
                self.error = StepError(
                    iteration=self.iterations + 1,
                    exc_type=type(exc).__name__,
                    message=str(exc).splitlines()[0] if str(exc) else "",
                    traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                )
                return False
            self.step_times.append(time.perf_counter() - t0)
            self.iterations += 1
        return True

    def measure(self) -> None:
        calls_s = self.step_times.total_s - self.steps_at_reading_s
        self.steps_at_reading_s = self.step_times.total_s
        t0 = time.perf_counter()
        row = self.meter.read(calls_s)
        self.measure_cost = time.perf_counter() - t0
        self.measure_costs.append(self.measure_cost)
        row["iteration"] = self.iterations
        row["elapsed_s"] = round(time.perf_counter() - self.start, 4)
        self.series.append(row)
        if self.on_reading is not None:
            self.on_reading(row)
        if self.iterations >= 1 and not self.rebased:
            self.rebased = True
            self.counts.rebaseline()
        budget = self.budget_s()
        left = _plan.DENSE_SHARE * budget - self.dense_spent if self.dense else None
        census_s = self.counts.maybe_take(self.iterations, self.step_times, budget, left)
        self.meter.native.settle(collect=census_s > 0, row_bytes=_row_bytes(row))
        if self.dense:
            self.dense_spent += self.measure_cost + census_s

    def dense_rising(self) -> bool:
        """Object counts or native heap bytes still rising: evidence may come soon."""
        return self.counts.rising() or _native.rising(self.series)

    def calibrate(self, looks_done: int = 0, k: int | None = None) -> None:
        self.plan = _plan.calibrate(
            self.config,
            self.series,
            iterations=self.iterations,
            # the median of the readings so far: one reading slowed by a busy machine would
            # otherwise batch hundreds of calls per reading for the whole check
            measure_cost_s=float(np.median(self.measure_costs[1:] or self.measure_costs)),
            step_time_s=self.step_time(),
            elapsed_s=time.perf_counter() - self.start,
            looks_done=looks_done,
            calls_per_measurement=k,
            bookkeeping_bytes_per_reading=self.meter.native.bookkeeping_per_reading(),
        )
        if self.probe is not None and not looks_done:
            self.probe.mark(self.iterations)

    # -- looks ---------------------------------------------------------------------------------

    def host_key(self, final: bool) -> str:
        return _plan.host_key(self.config, self.series, self.meter.children_seen, final)

    def count_support(self, key: str) -> bool:
        """Exact evidence at this look: rising counts of some kind, or rising bytes in use."""
        if self.plan is None:
            return False
        counted = self.counts.look(self.series, self.plan.alpha_per_look, key)
        native = _native.support(
            self.series, alpha=self.plan.alpha_per_look, tolerance=self.plan.tolerance_bytes_per_iter
        )
        self.native_support = self.native_unseen(native)
        return counted or self.native_support.supports

    def native_unseen(self, native: _native.NativeSupport) -> _native.NativeSupport:
        """``native`` weighed beside the census (``_native.beside_counts``): counts that spoke are
        on, not left out for cost, with two censuses or more by this look."""
        counts = self.counts
        counted = (
            counts.enabled and not counts.fallback and len(counts.points) >= 2 and counts.support is not None
        )
        kinds = counts.support.kinds if counted and counts.support is not None else ()
        return _native.beside_counts(native, counted, kinds)

    def flat_support(self) -> _evidence.FlatCounts | None:
        """How long every counted kind has stayed exactly flat (``_evidence.flat_counts``), when
        the counts can speak for ``no_leak``: censuses on and not dropped for cost, and bytes in
        use read in this process alone (no child processes, whose allocations are not in them).
        ``_plan.flat_decision`` judges the length."""
        counts = self.counts
        if not counts.enabled or counts.fallback or self.meter.tree_seen or len(counts.points) < 2:
            return None
        return _evidence.flat_counts(counts.points)

    # -- the end -------------------------------------------------------------------------------

    def reported_series(self) -> tuple[str, list[dict[str, Any]]]:
        """The metric name and the series decided on: metric auto reports PSS rows only (RSS kept
        alongside) once the tree had children."""
        if self.config.metric != "auto":
            return self.config.metric, self.series
        if self.host_key(True) != "pss_bytes":
            return "rss", self.series
        rows = [
            {**r, "bytes": r["pss_bytes"], "rss_bytes": r["bytes"], "untrimmed_bytes": None}
            for r in self.series
            if r.get("pss_bytes") is not None
        ]
        return "pss", rows

    def attribution(self, warm_iter: int, verdict: Verdict) -> tuple[tuple[KindGrowth, ...], tuple[str, ...]]:
        from trainguard.leaks.attribution import framework_hints, growth_by_kind

        growth: tuple[KindGrowth, ...] = ()
        hints: tuple[str, ...] = ()
        points = self.counts.points
        if self.config.attribution and points:
            try:
                growth = growth_by_kind(points, from_iteration=warm_iter)
                hints = framework_hints(growth)
            except Exception as err:
                logger.warning("attribution failed: %s", err)
        if self.probe is not None:
            try:
                growth = growth + self.probe.growth(self.iterations)
            finally:
                self.probe.stop()  # before the holder search, which tracemalloc would slow down
        try:
            growth = self.counts.with_holders(growth, verdict)
        except Exception as err:  # naming holders must never cost the verdict
            logger.warning("holder search failed: %s", err)
        return growth, hints

    def native_reason(self) -> str:
        """When bytes in use (and not counts) let a leak through before the warm-up wait: say so."""
        native, look, support = self.native_support, self.last_look, self.counts.support
        if native is None or not native.supports or look is None or self.iterations >= look.leak_gate:
            return ""
        if support is not None and support.supports and not self.counts.fallback:
            return ""
        name = self.meter.native.probe.name if self.meter.native.probe else "?"
        return (
            f"; called before the {look.leak_gate}-call warm-up wait on allocator evidence: "
            f"{_native.support_text(native, name)}, and RSS agrees"
        )

    def counts_reason(self, verdict: Verdict) -> str:
        """What exact evidence adds to the reason of a leak: that bytes in use or counts allowed it
        before the warm-up gate, that counts found nothing (memory alone), or were left out."""
        counts = self.counts
        if verdict is not Verdict.LEAK:
            return ""
        native = self.native_reason()
        if native and counts.support is not None and counts.support.found_nothing and not counts.fallback:
            native += (
                "; counts found no growing kind of Python-visible object: the growth is in native "
                "memory (e.g. held by a C extension)"
            )
        if native or not counts.enabled:
            return native + (f"; {counts.fallback}" if counts.fallback else "")
        if counts.fallback:
            return f"; {counts.fallback}"
        support = counts.support
        look = self.last_look
        if support is not None and support.supports and look is not None and self.iterations < look.leak_gate:
            return (
                f"; called before the {look.leak_gate}-call warm-up wait on count evidence: "
                + _evidence.support_text(support, counts.points)
            )
        if support is not None and support.found_nothing:
            return (
                "; counts found no growing kind of Python-visible object: the verdict rests on memory "
                "alone (the growth is in native memory, e.g. held by a C extension)"
            )
        return ""

    def report(self) -> LeakReport:
        elapsed = time.perf_counter() - self.start
        decision, gpu_decision, tolerance, alpha = self.final_decisions()
        metric, series = self.reported_series()
        verdict, reason = _plan.final_verdict(
            decision,
            gpu_decision,
            self.error,
            iterations=self.iterations,
            readings=len(series),
            step_times=self.step_times,
            elapsed_s=elapsed,
            tolerance=tolerance,
            flat_readings=self.last_look.flat_readings if self.last_look else math.inf,
        )
        self.counts.finish(self, alpha, self.host_key(True))
        reason += self.counts_reason(verdict)
        return _build_report(
            self, series, metric, verdict, reason, decision, gpu_decision, tolerance, alpha, elapsed
        )


def _build_report(
    loop: _Loop,
    series: list[dict[str, Any]],
    metric: str,
    verdict: Verdict,
    reason: str,
    decision: stats.Decision,
    gpu_decision: stats.Decision | None,
    tolerance: float,
    alpha: float,
    elapsed: float,
) -> LeakReport:
    """Assemble the LeakReport: slopes over the settled part, attribution, retention, GPU."""
    warm, slopes = settled_slope(series, decision)
    growth, hints = loop.attribution(slopes["warmup_iterations"], verdict)
    gpu = {"source": loop.plan.gpu_key, **analysis_dict(gpu_decision)} if gpu_decision and loop.plan else None
    look = loop.last_look
    plan = loop.plan
    fields, extra = loop.report_fields(series, tolerance, alpha, elapsed)
    return LeakReport(
        verdict=verdict,
        reason=reason,
        metric=metric,
        **slopes,
        **fields,
        calls_per_measurement=plan.calls_per_measurement
        if plan
        else (loop.config.calls_per_measurement or 1),
        growth_by_kind=growth,
        hints=hints,
        gpu=gpu,
        retention=_retention(series, warm, alpha, tolerance, decision),
        allocator=_native.report_dict(
            loop.meter.native,
            series,
            warm_iter=slopes["warmup_iterations"],
            rss_slope=slopes["slope_bytes_per_iter"],
            tolerance=tolerance,
            alpha=alpha,
            last=loop.native_support,
            children=loop.meter.tree_seen,
        ),
        error=loop.error,
        isolated=loop.isolated,
        counts=loop.counts.report(),
        extra={
            **extra,
            "min_iterations_for_leak": look.leak_gate
            if look
            else (loop.config.min_iterations or _plan.LEAK_GATE_ITERATIONS),
            "python": sys.version.split()[0],
        },
    )


def _retention(
    series: list[dict[str, Any]], warm: int, alpha: float, tolerance: float, decision: stats.Decision
) -> dict[str, Any] | None:
    rows = [r for r in series[warm:] if r.get("untrimmed_bytes") is not None]
    if len(rows) < 4:
        return None
    held = np.array([r["untrimmed_bytes"] - r["bytes"] for r in rows], dtype=float)
    xs = [r["iteration"] for r in rows]
    untrimmed = stats.decide(
        [r["untrimmed_bytes"] for r in rows], xs, alpha=alpha, tolerance=tolerance, final=True
    )
    note = ""
    trimmed_flat = decision.slope is not None and decision.slope.slope < tolerance
    if untrimmed.verdict is Verdict.LEAK and decision.verdict is not Verdict.LEAK and trimmed_flat:
        note = (
            "RSS before malloc_trim(0) grows but the memory after it does not: the growth is freed memory "
            "that glibc's allocator keeps, not live objects (try MALLOC_TRIM_THRESHOLD_ / MALLOC_ARENA_MAX, "
            "or trainguard's cleanup)"
        )
    elif decision.verdict is Verdict.LEAK:
        note = "growth persists after malloc_trim(0): live allocations, not allocator retention"
    return {
        "retained_median_bytes": float(np.median(held)),
        "retained_max_bytes": float(np.max(held)),
        "untrimmed_slope_bytes_per_iter": untrimmed.slope.slope if untrimmed.slope else None,
        "untrimmed_verdict": untrimmed.verdict.value if untrimmed.verdict else None,
        "note": note,
        "text": f"allocator kept {format_bytes(float(np.median(held)))} (median) that malloc_trim(0) returned",
    }
