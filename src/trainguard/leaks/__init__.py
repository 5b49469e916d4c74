"""Leak detection: does a training step leak, how much per iteration, and what grows.

``leakcheck(step)`` calls ``step()`` repeatedly and reads memory after each call (after
``gc.collect()`` and glibc's ``malloc_trim(0)``), then decides with the sequential test of
:mod:`trainguard.leaks.stats`: ``leak``, ``no_leak``, ``plateau`` (grew, then stopped) or
``inconclusive``, each with its reason, a robust slope in bytes per iteration with a 95 % interval,
and the census kinds that grow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainguard.leaks._report import KindGrowth, LeakReport, StepError
from trainguard.leaks._run import NOT_SETTINGS, LeakCheckConfig, make_config
from trainguard.leaks.stats import Verdict

__all__ = [
    "leakcheck",
    "leakcheck_file",
    "make_config",
    "LeakCheckConfig",
    "LeakReport",
    "Verdict",
    "KindGrowth",
    "StepError",
]


#: the check's defaults, written once: in :class:`LeakCheckConfig`'s fields
_DEFAULT = LeakCheckConfig()


def leakcheck(
    step: Callable[..., Any],
    *,
    setup: Callable[[], Any] | None = None,
    max_iterations: int | None = _DEFAULT.max_iterations,
    min_iterations: int | None = _DEFAULT.min_iterations,
    max_time: str | float | None = _DEFAULT.max_time_s,
    min_calls: int | None = _DEFAULT.min_calls,
    metric: str = _DEFAULT.metric,
    isolated: bool = False,
    attribution: bool = _DEFAULT.attribution,
    tracemalloc: bool = _DEFAULT.tracemalloc,
    tolerance: str | float | None = _DEFAULT.tolerance_bytes_per_iter,
    alpha: float = _DEFAULT.alpha,
    trim: bool = _DEFAULT.trim,
    calls_per_measurement: int | None = _DEFAULT.calls_per_measurement,
    max_measurements: int = _DEFAULT.max_measurements,
    max_growth: str | int | None = _DEFAULT.max_growth_bytes,
    tracemalloc_full_stack: bool = _DEFAULT.tracemalloc_full_stack,
    allocator_evidence: bool = _DEFAULT.allocator_evidence,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> LeakReport:
    """Run ``step`` repeatedly and say whether memory leaks, how fast, and what grows.

    ``setup()`` runs once first; when it returns something other than None and ``step`` takes one
    positional argument, ``step(value)`` is called, otherwise ``step()``. Memory is read after
    every ``calls_per_measurement`` calls (batched automatically for fast steps so that reading
    costs about 2.5 % of the step's time), after ``gc.collect()`` and, on glibc, ``malloc_trim(0)``.
    The check stops as soon as the sequential test is confident, or when the budget is spent.

    Args:
        step: one iteration of the code under test.
        setup: called once before the first iteration; its return value may be passed to step.
        max_iterations: the most calls of ``step`` (None: limited by ``max_time`` only).
        min_iterations: no verdict before this many calls (except when the budget ends). None
            (default): ``no_leak`` and ``plateau`` after 10 calls, ``leak`` only after 120 calls,
            or after what 60 % of ``max_time`` allows for slow steps, and then only when the
            most recent readings grow on their own: warm-ups (allocator pools, kernel and
            tracing caches) grow for 50-80 iterations before they level off.
        max_time: the most wall time for the iterations, e.g. ``"5m"`` or seconds (default 120,
            two minutes); None: limited by ``max_iterations`` only.
        min_calls: the budget is at least this many calls (default 100): a step too slow for
            ``max_time`` to give them goes on past it until its evidence decides or it has made
            ``min_calls`` calls, and says so in a progress event; ``max_iterations`` stays a hard
            cap. None: ``max_time`` alone (a slow step may then end ``inconclusive``).
        metric: ``"auto"`` (default), ``"rss"``, ``"uss"`` or ``"pss"``, summed over this process
            and its children. ``"auto"`` decides on RSS while the process has no children and on
            the tree's PSS once it has some: growth in worker processes' private memory (a
            DataLoader's workers touching a forked dataset) changes nobody's RSS.
        isolated: run in a fresh Python process (the step and setup are sent with cloudpickle),
            so this process's state stays clean.
        attribution: take censuses of live framework objects and report the kinds that grow.
        tracemalloc: also report Python allocation sites that grow (slow: traces every allocation),
            each named by the first frame in your own code (not the standard library or site-packages).
        tracemalloc_full_stack: add each site's whole traced stack to its detail.
        allocator_evidence: read the C allocator's bytes in use at each reading (glibc
            ``mallinfo2``, a preloaded jemalloc or tcmalloc) and let a steady rise of them, with
            RSS agreeing, call a native leak before the warm-up wait. False: RSS and counts only
            (as before this evidence existed; the benchmarks compare the two).
        tolerance: growth per iteration below which there is no leak (``"16KB"`` or bytes);
            default: 1 MiB per minute of step time, at least 1 KiB per call plus the check's own
            bookkeeping (2 KiB per reading, spread over the calls between readings) unless that
            is over 64 MiB per minute of step time (steps under ~1 ms).
        alpha: the false-positive budget of the whole sequential test.
        trim: call ``malloc_trim(0)`` before each reading (glibc only) and report what it returned.
        calls_per_measurement: calls between readings; default automatic.
        max_measurements: the most readings (default 300).
        max_growth: stop when memory has grown this much since the start (``"2GB"``); default
            a quarter of the available memory, at most 4 GiB, so a fast leak cannot exhaust the host.
        progress: called with a dict (iteration, bytes, slope_bytes_per_iter...) as the check runs.

    Returns:
        A :class:`LeakReport`. A step that raises ends the check: the report keeps the series so
        far, the iteration and the traceback, and says ``inconclusive`` unless a leak was already clear.

    Raises:
        ConfigError: a bad argument (non-positive counts, unknown metric, no budget), a step that
            needs arguments setup does not provide, or (isolated) a step that cannot be sent.
    """
    # the settings, as given (first, so that locals() holds the arguments alone)
    settings = {name: value for name, value in locals().items() if name not in NOT_SETTINGS}
    from trainguard._nesting import refuse_nested

    refuse_nested("leak check")
    from trainguard.leaks._run import call_plan, run_loop

    config = make_config(**settings)
    if not callable(step):
        from trainguard.exceptions import ConfigError

        raise ConfigError(f"step must be callable, got {type(step).__name__}")
    if setup is not None and not callable(setup):
        from trainguard.exceptions import ConfigError

        raise ConfigError(f"setup must be callable or None, got {type(setup).__name__}")
    if setup is None:
        call_plan(step, None, False)  # a step that needs an argument fails here, before any work
    if isolated:
        from trainguard.leaks._child import run_isolated

        return run_isolated({"kind": "pickle", "step": step, "setup": setup}, config, progress=progress)
    return run_loop(step, setup, config, progress=progress)


def leakcheck_file(
    path: str,
    step: str,
    *,
    setup: str | None = None,
    config: LeakCheckConfig,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> LeakReport:
    """The leak check of function ``step`` of the file ``path``, in a fresh process: a Python file
    in a fresh interpreter, a JavaScript file (``.js``, ``.mjs``, ``.cjs``) in Node under
    ``--expose-gc``. This is what ``trainguard leakcheck file:step`` runs.

    Args:
        path: the file. step / setup: names of functions in it (``setup()`` runs once, before).
        config: from :func:`make_config` (the arguments of :func:`leakcheck`, validated).
        progress: called with each reading as it arrives.

    Raises:
        ConfigError: the file or a function in it cannot be loaded, or setup failed.
    """
    from trainguard._node import is_js_file

    if is_js_file(path):
        from trainguard.leaks._node import run_node

        return run_node(path, step, setup, config, progress=progress)
    from trainguard.leaks._child import run_isolated

    target = {"kind": "file", "path": path, "step": step, "setup": setup}
    return run_isolated(target, config, progress=progress)
