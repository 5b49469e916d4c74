"""The decisions of the leak loop, as pure functions over its readings.

The loop in :mod:`trainguard.leaks._run` calls the step, takes readings and asks this module four
questions, each answerable without a process: how to batch calls and when to look
(:func:`calibrate`), how many calls a ``leak`` verdict must wait for (:func:`leak_gate`), what one
look says (:func:`look`), and what the final verdict is once the loop has stopped
(:func:`final_verdict`). Tests drive these with synthetic readings, so the gates tested are the
ones the loop uses.

When to call a leak (``min_iterations=None``): allocator pools, kernel and tracing caches grow for
50-80 iterations and then level off, and over such a window a significant slope is no evidence of
a leak. ``no_leak`` and ``plateau`` may come after 10 calls, ``leak`` only after 120 calls, or,
for steps too slow for 120 calls in 60 % of ``max_time``, after what fits, and then only under
the strict test (``stats.decide(strong=True)``: the most recent third must grow on its own).

Count evidence shortens that wait. While some count that could hold memory keeps rising, the loop
reads after every call and takes censuses as often as its share of the budget pays for
(:func:`dense_next`, :func:`dense_census_gap`); when a kind's exact count has risen at every
census for 15 calls past its fill allowance (``_evidence.count_support``), :func:`look` lets a
leak through at the next look, with the memory series confirming at the check's own level over 8
settled readings (the count test has already paid for the looks). A kind that adds many objects a
call (a Keras TF fit: ~1,100 graph operations; tf.function retracing; kept torch graphs) is called
within about 16 calls, and so is an array or tensor a call appended to a list that only grows at
its end (its holder's evidence: ``_evidence.holder_allowance``); one entry a call into a dict must
first pass the 128 objects a bounded cache may hold, about 130 calls. When the counts stop rising the loop thins its readings to the
batch size it would have used (:func:`thin`) and plans the rest of the looks from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trainguard.leaks import stats
from trainguard.leaks.stats import Verdict

__all__ = [
    "LEAK_GATE_ITERATIONS",
    "Plan",
    "LookResult",
    "calibrate",
    "leak_gate",
    "strong_needed",
    "host_key",
    "out_of_budget",
    "past_max_time",
    "past_max_time_note",
    "look",
    "decide_series",
    "final_verdict",
    "warmup_hold",
    "auto_tolerance",
    "dense_next",
    "dense_census_gap",
    "thin",
]

#: Calls before a ``leak`` verdict when the budget allows (min_iterations=None): allocator pools,
#: kernel and tracing caches grow for 50-80 iterations and then level off, and the sequential test
#: calls such a ramp a leak long before the level is reached (the check that growth persists in
#: the recent half needs the window to reach past the ramp's end).
LEAK_GATE_ITERATIONS = 120
#: The share of ``max_time`` that waiting for ``LEAK_GATE_ITERATIONS`` may take; slower steps get
#: a lower gate and a stricter leak test (``stats.decide(strong=True)``).
LEAK_GATE_BUDGET_SHARE = 0.6
#: Calls before a ``no_leak`` or ``plateau`` verdict when min_iterations is None.
BASE_MIN_ITERATIONS = 10
#: Reading overhead aimed at, as a share of the time spent in the step itself.
OVERHEAD_TARGET = 0.025
MAX_CALLS_PER_MEASUREMENT = 100_000
#: Count evidence is judged in calls (a kind must rise at every census over at least 15 calls):
#: while some count that could hold memory keeps rising, the loop reads after every call (no
#: batching) and takes censuses as often as DENSE_SHARE of the time budget pays for, so that a leak
#: of countable objects can be called within about 16 calls even on a fast step. It reads call by
#: call for the first DENSE_MIN_CALLS calls whatever the counts say, and at most DENSE_MAX_CALLS
#: (past ``stats.count_trend``'s fill allowance of 128 objects, for kinds that add one a call).
DENSE_MIN_CALLS = 4
DENSE_MAX_CALLS = 160
#: The calls-by-call phase's extra cost (its readings and censuses) as a share of the time budget.
DENSE_SHARE = 0.05
#: Settled readings the memory series needs to confirm a leak that counts support (12 otherwise).
COUNT_CONFIRM_POINTS = 8
#: Extra looks while reading call by call, so that count evidence complete at 15-19 calls is
#: acted on before call 20 (the schedule alone looks at readings 10, 13, 17, 22...).
DENSE_LOOKS = (16, 19)
#: Calls the censuses of that phase are spread over when they cannot all be afforded.
DENSE_TARGET_CALLS = 16


@dataclass(frozen=True, slots=True)
class Plan:
    """What calibration decided after the first readings.

    Attributes:
        calls_per_measurement: calls between two readings.
        tolerance_bytes_per_iter: growth below this is not a leak.
        schedule: reading counts at which the sequential test looks.
        alpha_per_look: each look's false-positive level (the budget split over looks and series).
        gpu_key: the row key of the GPU series also decided on, or None.
        live_words: how :func:`retention_hold` names the live series and the memory RSS held
            beyond it, where the loop's live series is not Python's (``_node.NODE_LIVE_WORDS``:
            RSS less the free pages of V8's heap); None: Python's (bytes in use plus RSS outside
            glibc's heaps).
        leak_gate_iterations: calls a ``leak`` from memory alone waits for when the budget allows
            (:func:`leak_gate`): :data:`LEAK_GATE_ITERATIONS`, longer for a Node step
            (``_node.NODE_LEAK_GATE_ITERATIONS``: V8's warm-up).
        warmup_calls, warmup_leak_bytes: the engine's own warm-up, which no budget shortens
            (:func:`warmup_hold`): before ``warmup_calls`` calls a ``leak`` from memory alone needs
            its interval above ``warmup_leak_bytes`` a call. 0: none (Python's warm-ups are the
            gate's business); a Node step's: ``_node.NODE_WARMUP_CALLS``.
    """

    calls_per_measurement: int
    tolerance_bytes_per_iter: float
    schedule: tuple[int, ...]
    alpha_per_look: float
    gpu_key: str | None
    live_words: tuple[str, str] | None = None
    leak_gate_iterations: int = LEAK_GATE_ITERATIONS
    warmup_calls: int = 0
    warmup_leak_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class LookResult:
    """One look: the host and GPU decisions, whether to stop, and the leak gate it used.
    ``flat_readings``: at a final look that did not decide, the readings after which exact evidence
    would say ``no_leak`` as it stands (:func:`flat_readings_needed`; inf when it cannot)."""

    decision: stats.Decision
    gpu_decision: stats.Decision | None
    stop: bool
    leak_gate: int
    flat_readings: float = math.inf


#: What the check itself keeps in the measured process per reading (the reading's row, its share of
#: census points, the heap a census churns): measured 1.0-1.4 KiB a reading on a flat step read
#: after every call (bench/leak_corpus/flat_big_temporaries.py, 2026-12-01), with a margin. The
#: default tolerance adds it per call, so the check never calls its own bookkeeping a leak.
BOOKKEEPING_BYTES_PER_READING = 2048.0


def auto_tolerance(
    step_time_s: float, calls_per_reading: int = 1, bookkeeping_bytes_per_reading: float | None = None
) -> float:
    """The default tolerance: 1 MiB per minute of step time, and at least 1 KiB per call plus the
    check's own bookkeeping per call (:data:`BOOKKEEPING_BYTES_PER_READING` / ``calls_per_reading``).

    Under 1.4 GB a day of continuous running is not a leak anyone acts on; a step that keeps a
    float per call in a history list grows RSS by 200-360 B per call (the floats plus allocator
    fragmentation), which nobody calls a leak either. A step of 40-250 ms read after every call
    also grows by what the check keeps for each reading (about 1.0-1.4 KiB): without that term a
    flat step was called a leak at 1.2-1.7 KiB a call. The floor is capped at 64 MiB per minute of
    step time, so that a very fast step (50 us) keeping 200 B per call, 240 MB a minute, is still a
    leak.

    ``bookkeeping_bytes_per_reading``: what the check measured it kept per reading (the reading's
    row and its values, plus bytes in use after recording it less before,
    ``_native.AllocatorSeries``); twice that, when above the constant, is the bookkeeping term, and
    the floor never falls below twice the measured bookkeeping per call, whatever the step time.
    """
    per_minute = step_time_s / 60.0
    calls = max(int(calls_per_reading), 1)
    measured = 2.0 * (bookkeeping_bytes_per_reading or 0.0)
    floor = 1024.0 + max(BOOKKEEPING_BYTES_PER_READING, measured) / calls
    return max(1024.0 * 1024.0 * per_minute, min(floor, 64 * 1024.0 * 1024.0 * per_minute), measured / calls)


def _batch_cap(
    config: Any, series: list[dict[str, Any]], iterations: int, step_time_s: float, elapsed_s: float
) -> int:
    """The most calls per reading: the budget still holds about 40 readings and a fast leak cannot
    outrun ``max_growth`` in fewer than 60 readings."""
    cap = MAX_CALLS_PER_MEASUREMENT
    if config.max_iterations is not None:
        cap = max(1, min(cap, (config.max_iterations - iterations) // 40))
    if config.max_time_s is not None:
        # the statistics need readings: accept more overhead rather than fewer than ~40
        calls_left = (config.max_time_s - elapsed_s) / max(step_time_s, 1e-9)
        cap = max(1, min(cap, int(calls_left // 40)))
    if config.max_growth_bytes:
        grown = max(series[-1]["bytes"] - series[1]["bytes"], 0)
        per_call = grown / max(iterations - int(series[1]["iteration"]), 1)
        if per_call > 0:
            cap = max(1, min(cap, int(config.max_growth_bytes / 60 / per_call)))
    return cap


def calibrate(
    config: Any,
    series: list[dict[str, Any]],
    *,
    iterations: int,
    measure_cost_s: float,
    step_time_s: float,
    elapsed_s: float,
    looks_done: int = 0,
    calls_per_measurement: int | None = None,
    bookkeeping_bytes_per_reading: float | None = None,
) -> Plan:
    """Decide batching, tolerance and the look schedule from the first (at least 3) readings.

    ``config`` is a :class:`~trainguard.leaks._run.LeakCheckConfig`. ``looks_done``: looks already
    taken (when the plan is made again after reading call by call, :func:`dense_next`): the new
    schedule starts after the readings so far and the false-positive budget is split over the old
    looks and the new ones; ``calls_per_measurement`` then keeps the batch size the first plan chose
    (the call-by-call readings cost more, e.g. a PSS walk at each, and would batch far more calls).
    """
    k = calls_per_measurement or config.calls_per_measurement
    if k is None:
        # calls per reading so that reading costs about OVERHEAD_TARGET of the time in the step
        want = math.ceil(measure_cost_s / max(OVERHEAD_TARGET * step_time_s, 1e-9))
        k = min(max(1, want), _batch_cap(config, series, iterations, step_time_s, elapsed_s))
    k = int(k)
    tolerance = config.tolerance_bytes_per_iter
    if tolerance is None:
        tolerance = auto_tolerance(step_time_s, k, bookkeeping_bytes_per_reading)
    n = len(series)
    planned = config.max_measurements
    if config.max_iterations is not None:
        planned = min(planned, n + math.ceil((config.max_iterations - iterations) / k))
    if config.max_time_s is not None:
        per_reading = k * step_time_s + measure_cost_s
        left = config.max_time_s - elapsed_s
        by_time = n + max(0, int(left / max(per_reading, 1e-9)))
        if config.min_calls is not None:  # the budget is at least min_calls calls
            by_time = max(by_time, n + math.ceil(max(0, config.min_calls - iterations) / k))
        planned = min(planned, by_time)
    first = config.min_measurements if not looks_done else max(config.min_measurements, n + 1)
    planned = max(planned, first)
    schedule = stats.look_schedule(first, planned)
    if config.attribution and config.calls_per_measurement is None and not looks_done:
        schedule = tuple(sorted(set(schedule) | {n for n in DENSE_LOOKS if first < n < planned}))
    alpha_look = stats.alpha_per_look(config.alpha, len(schedule) + 1 + looks_done)
    gpu_key = None
    if any(r.get("gpu_allocated_bytes") is not None for r in series):
        gpu_key = "gpu_allocated_bytes"
    elif any(r.get("gpu_nvml_bytes") is not None for r in series):
        gpu_key = "gpu_nvml_bytes"
    if gpu_key is not None:
        alpha_look /= 2  # two series decided on: the budget is split between them
    return Plan(k, float(tolerance), schedule, alpha_look, gpu_key)


def dense_next(config: Any, *, iterations: int, rising: bool, spent_s: float, budget_s: float) -> bool:
    """Whether the next block is one call followed by a reading (the phase that lets count evidence
    speak within about 16 calls): with counts on and no batch size given, for the first
    DENSE_MIN_CALLS calls, then while some count that could hold memory keeps rising at every
    census (``rising``, :func:`trainguard.leaks._evidence.still_rising`), up to DENSE_MAX_CALLS
    calls, and while the phase's extra cost ``spent_s`` stays within DENSE_SHARE of ``budget_s``
    (the step time the whole check may spend). Once it ends it does not come back."""
    if not config.attribution or config.calls_per_measurement is not None:
        return False
    if budget_s > 0 and spent_s >= DENSE_SHARE * budget_s:
        return False
    return iterations < DENSE_MIN_CALLS or (rising and iterations < DENSE_MAX_CALLS)


def dense_census_gap(cost_s: float, budget_s: float) -> int:
    """Readings between censuses while reading call by call: 1 when DENSE_TARGET_CALLS censuses of
    ``cost_s`` fit in DENSE_SHARE of ``budget_s``, else spread so that about that many calls are
    covered (a Keras TF census of 0.4 s on a 2-minute budget: every second call)."""
    if cost_s <= 0 or budget_s <= 0:
        return 1
    return max(1, math.ceil(cost_s * DENSE_TARGET_CALLS / (DENSE_SHARE * budget_s)))


def thin(series: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The readings as the batched loop would have taken them: the first three one call apart
    (the loop calibrates on them, and the warm-up cut reads the first calls' allocations there),
    then at least ``k`` calls between two kept ones, and the last. After reading call by call, the
    memory series continues as if batched from the start, so that its statistics see evenly spaced
    readings."""
    if k <= 1 or len(series) <= 4:
        return list(series)
    kept = list(series[:3])
    for row in series[3:-1]:
        if row["iteration"] - kept[-1]["iteration"] >= k:
            kept.append(row)
    if series[-1]["iteration"] - kept[-1]["iteration"] < k and len(kept) > 3:
        kept.pop()
    kept.append(series[-1])
    return kept


def leak_gate(
    config: Any,
    *,
    iterations: int,
    elapsed_s: float,
    step_time_s: float,
    gate_iterations: int = LEAK_GATE_ITERATIONS,
) -> int:
    """Calls a ``leak`` verdict waits for at this look.

    ``min_iterations`` when given; otherwise ``gate_iterations`` (the plan's), lowered to what
    LEAK_GATE_BUDGET_SHARE of ``max_time`` (or ``max_iterations``) allows. Recomputed at each look
    from the recent step time: a leaking step often slows down as it leaks (a Keras TF fit loop:
    0.6 s, then over 1 s), and the verdict should still come within the budget's share.
    """
    if config.min_iterations is not None:
        return int(config.min_iterations)
    fits = math.inf
    if config.max_time_s is not None:
        left = LEAK_GATE_BUDGET_SHARE * config.max_time_s - elapsed_s
        fits = iterations + max(0.0, left) / max(step_time_s, 1e-9)
        if config.min_calls is not None:  # the same share of a budget of min_calls calls
            fits = max(fits, LEAK_GATE_BUDGET_SHARE * config.min_calls)
    if config.max_iterations is not None:
        fits = min(fits, config.max_iterations)
    return int(max(BASE_MIN_ITERATIONS, min(gate_iterations, fits)))


def strong_needed(config: Any, iterations: int, gate_iterations: int = LEAK_GATE_ITERATIONS) -> bool:
    """Fewer calls than a warm-up can last: a leak must also show in the most recent readings."""
    return config.min_iterations is None and iterations < gate_iterations


def host_key(config: Any, series: list[dict[str, Any]], children_seen: bool, final: bool) -> str:
    """The row key decided on: metric auto reads the tree's PSS once it has had children (if
    enough PSS readings exist by the end), otherwise the metric's bytes."""
    if config.metric == "auto" and children_seen:
        have = sum(1 for r in series if r.get("pss_bytes") is not None)
        if have >= 8 or not final:
            return "pss_bytes"
    return "bytes"


def look_due(
    config: Any,
    plan: Any,
    series: list[dict[str, Any]],
    *,
    iterations: int,
    elapsed_s: float,
    next_block_s: float,
) -> tuple[bool, bool]:
    """``(final, look_now)`` after a reading: whether the budget is spent (:func:`out_of_budget`),
    and whether the loop looks now (the budget is spent, or the plan's schedule says so). The
    Python and Node loops both ask this."""
    final = out_of_budget(
        config, series, iterations=iterations, elapsed_s=elapsed_s, next_block_s=next_block_s
    )
    return final, final or (plan is not None and len(series) in plan.schedule)


def progress_event(
    series: list[dict[str, Any]], *, iterations: int, elapsed_s: float, k: int
) -> dict[str, Any]:
    """What a progress callback gets after a reading: the slope over the last 60 readings."""
    ys = [r["bytes"] for r in series[-60:]]
    xs = [r["iteration"] for r in series[-60:]]
    return {
        "iteration": iterations,
        "measurements": len(series),
        "bytes": ys[-1],
        "elapsed_s": elapsed_s,
        "slope_bytes_per_iter": stats.theil_sen(ys, xs) if len(series) >= 3 else None,
        "calls_per_measurement": k,
    }


def out_of_budget(
    config: Any, series: list[dict[str, Any]], *, iterations: int, elapsed_s: float, next_block_s: float
) -> bool:
    """Whether the loop must stop: iterations, time, readings or the growth cap are spent. Time
    ends the loop only once ``min_calls`` calls are made (:func:`past_max_time`)."""
    if config.max_iterations is not None and iterations >= config.max_iterations:
        return True
    if config.max_time_s is not None and elapsed_s + next_block_s > config.max_time_s:
        if not past_max_time(config, iterations=iterations, elapsed_s=elapsed_s, next_block_s=next_block_s):
            return True
    if len(series) >= config.max_measurements:
        return True
    grown = series[-1]["bytes"] - series[0]["bytes"]
    return bool(config.max_growth_bytes) and grown > config.max_growth_bytes


def decide_series(
    series: list[dict[str, Any]],
    key: str,
    alpha: float,
    tolerance: float,
    final: bool,
    early_ok: bool,
    leak_ok: bool = True,
    strong: bool = False,
    min_points: int = 12,
    long_run: bool = True,
) -> stats.Decision:
    """:func:`stats.decide` on one key of the rows, with the gates applied: a verdict before
    ``early_ok`` (min_iterations), or a leak before ``leak_ok`` (the leak gate), is held back
    (verdict None) unless this is the final look."""
    pairs = [(r["iteration"], r[key]) for r in series if r.get(key) is not None]
    xs = [p[0] for p in pairs]
    ys = [p[1] for p in pairs]
    d = stats.decide(
        ys,
        xs,
        alpha=alpha,
        tolerance=tolerance,
        final=final,
        strong=strong,
        min_points=min_points,
        long_run=long_run,
    )
    held = not early_ok or (d.verdict is Verdict.LEAK and not leak_ok)
    if held and not final and d.verdict is not None:
        why = (
            "below min_iterations"
            if not early_ok
            else "growing; waiting for enough iterations to rule out a warm-up"
        )
        return stats.Decision(
            None, why, d.warmup_index, d.slope, d.recent_slope, d.step_indices, d.noise_bytes, d.alpha
        )
    return d


#: Of the tolerance, what bytes in use may rise per call (their interval's upper bound) for exact
#: evidence to support ``no_leak``: Python objects kept in pymalloc's arenas show in bytes in use
#: only through the pointer arrays of the containers holding them (8 of a float's 32 bytes).
FLAT_ALLOCATOR_SHARE = 0.25
#: Calls over which every counted kind must have stayed exactly flat (0 objects a call) for exact
#: evidence to support ``no_leak``: the mirror of the 15 calls a count must rise over to support a
#: ``leak`` (``stats.count_trend``'s ``min_calls``), so that a slow step is decided in about 16-20.
FLAT_MIN_CALLS = 15
#: Censuses in that flat run (a Keras-TF census is taken every few calls once counts stop rising).
FLAT_MIN_CENSUSES = 4


def flat_decision(
    series: list[dict[str, Any]],
    key: str,
    memory: stats.Decision,
    *,
    alpha: float,
    tolerance: float,
    flat: Any,
) -> stats.Decision | None:
    """``no_leak`` from exact evidence, for a step too slow for RSS's noise to settle (a Keras fit
    of seconds swings RSS by MBs): every counted kind exactly flat over at least
    :data:`FLAT_MIN_CALLS` calls and :data:`FLAT_MIN_CENSUSES` censuses (``flat``, an
    ``_evidence.FlatCounts`` the caller gives only when the counts are usable), the allocator's
    bytes in use with an interval at this look's level under :data:`FLAT_ALLOCATOR_SHARE` of the
    tolerance over 8 settled readings, and RSS itself not growing past the tolerance
    (``stats.rss_allows_flat``: memory outside both malloc and Python objects, an ``mmap`` kept a
    call, shows in RSS alone). None when any of the three disagrees or is missing (no allocator
    evidence: no bytes in use in the rows)."""
    from trainguard.leaks._native import KEY

    if flat is None or flat.calls < FLAT_MIN_CALLS or flat.censuses < FLAT_MIN_CENSUSES:
        return None
    est = memory.slope
    if est is None:
        return None
    if stats.rss_allows_flat(est, alpha=alpha, tolerance=tolerance):
        in_use = decide_series(
            series, KEY, alpha, FLAT_ALLOCATOR_SHARE * tolerance, False, True, min_points=COUNT_CONFIRM_POINTS
        )
        if in_use.verdict is not Verdict.NO_LEAK or in_use.slope is None:
            return None
        reason = _flat_reason(est, in_use.slope, flat, tolerance)
    else:
        # RSS too noisy or growing: its part outside the free memory malloc keeps may still agree
        live = live_decision(series, alpha=alpha, tolerance=tolerance)
        if live is None or live.verdict is not Verdict.NO_LEAK or live.slope is None:
            return None
        reason = _live_reason(est, live.slope, flat, tolerance)
    return stats.Decision(
        Verdict.NO_LEAK,
        reason,
        memory.warmup_index,
        est,
        memory.recent_slope,
        memory.step_indices,
        memory.noise_bytes,
        memory.alpha,
    )


#: Live memory speaks for the run when it was read within the last quarter of the readings, and
#: at least within the last :data:`LIVE_RECENT_READINGS`: on a loaded machine the heaps' split is
#: read every few readings (``_native.heaps_affordable``), and asking it of the latest reading
#: alone left RSS to call a leak on its own (retention inside the heaps) whenever that reading
#: went without the split; read longer ago, it may miss a late rise.
LIVE_RECENT_READINGS = 5


def live_is_recent(series: list[dict[str, Any]]) -> bool:
    """Whether the live series (``_native.LIVE_KEY``) was read recently enough to speak for the
    run (:data:`LIVE_RECENT_READINGS`)."""
    from trainguard.leaks._native import LIVE_KEY

    window = max(LIVE_RECENT_READINGS, len(series) // 4)
    return any(r.get(LIVE_KEY) is not None for r in series[-window:])


def live_decision(series: list[dict[str, Any]], *, alpha: float, tolerance: float) -> stats.Decision | None:
    """The test of the live series (``_native.LIVE_KEY``: bytes in use plus RSS outside glibc's
    heaps, read recently: :func:`live_is_recent`), or None where it is not read. RSS less the free
    memory malloc keeps inside its heaps: what grows or swings there while bytes in use do not is
    retention, fragmentation, or pages ``malloc_trim`` gave back touched again, never live memory;
    memory held outside malloc (an ``mmap`` kept a call, pymalloc's arenas) stays in it."""
    from trainguard.leaks._native import LIVE_KEY

    if not series or not live_is_recent(series):
        return None
    return decide_series(series, LIVE_KEY, alpha, tolerance, False, True, min_points=COUNT_CONFIRM_POINTS)


#: What Python's live series is, and where RSS grew when it grew beyond it (:func:`retention_hold`).
MALLOC_LIVE_WORDS = (
    "live memory (the allocator's bytes in use plus RSS outside glibc's heaps)",
    "the growth is inside malloc's heaps, free memory the allocator keeps (retention or fragmentation; pages "
    "malloc_trim gave back, touched again), not live allocations; jemalloc keeps RSS flatter "
    "(`trainguard run --allocator jemalloc` in workers)",
)


def _live_grows_too(live: stats.Decision, tolerance: float) -> bool:
    """Live memory's interval is clear of the tolerance and its recent part grows too: what RSS
    sees is live growth, whatever gate live memory's own look has not passed yet (on a loaded
    machine its last few readings, read every few readings, miss the tail test's p < 0.01 while
    their slope is RSS's: a 64 KiB mmap a call was called retention inside the heaps)."""
    if live.slope is None or live.slope.ci_low <= tolerance:
        return False
    return live.recent_slope is None or live.recent_slope.slope >= tolerance


def retention_hold(
    series: list[dict[str, Any]],
    memory: stats.Decision,
    *,
    alpha: float,
    tolerance: float,
    final: bool,
    gates: tuple[bool, bool, bool],
    words: tuple[str, str] | None = None,
) -> stats.Decision:
    """A ``leak`` that RSS alone calls, checked against live memory (:func:`live_decision`'s
    series, at this look's gates) where it was read recently (:func:`live_is_recent`): when live
    memory does not grow like a leak, RSS grew inside glibc's heaps, free memory the allocator
    keeps, which is never a leak by itself. The look then waits (or, at the final look, says what
    live memory says), with the reason naming where RSS grew; it waits too while live memory has
    too few readings for a slope (read every few readings on a loaded machine), except at the final
    look. ``memory`` as it is where live memory is not read or agrees."""
    from trainguard.leaks._native import LIVE_KEY

    if not series or not live_is_recent(series):
        return memory
    live = decide_series(series, LIVE_KEY, alpha, tolerance, final, *gates)
    if live.verdict is Verdict.LEAK or memory.slope is None:
        return memory
    if live.slope is None:
        # read, but sparsely (a loaded machine): too few readings of it for a slope yet
        if final:
            return memory
        read = sum(1 for r in series if r.get(LIVE_KEY) is not None)
        return replace(
            memory, verdict=None, reason=f"{memory.reason}; waiting for live memory ({read} readings of it)"
        )
    if _live_grows_too(live, tolerance):
        return memory
    fmt = _fmt_signed
    name, beyond = words or MALLOC_LIVE_WORDS
    where = (
        f"RSS grows {fmt(memory.slope.slope)}/iter (CI {fmt(memory.slope.ci_low)} .. {fmt(memory.slope.ci_high)}) "
        f"but {name} does not grow like a leak, {fmt(live.slope.slope)}/iter (CI {fmt(live.slope.ci_low)} .. "
        f"{fmt(live.slope.ci_high)}): {beyond}"
    )
    verdict = live.verdict if live.verdict is Verdict.NO_LEAK or final else None
    if verdict is Verdict.NO_LEAK:
        reason = f"no leak: {where}"
    elif verdict is None:
        reason = f"{where}; waiting for live memory to decide"
    else:
        reason = f"{where}; live memory: {live.reason}"
    return stats.Decision(
        verdict,
        reason,
        memory.warmup_index,
        memory.slope,
        memory.recent_slope,
        memory.step_indices,
        memory.noise_bytes,
        memory.alpha,
    )


def flat_readings_needed(
    series: list[dict[str, Any]], memory: stats.Decision, flat: Any, *, alpha: float, tolerance: float, k: int
) -> float:
    """Readings after which :func:`flat_decision` would say ``no_leak``, if the evidence goes on as
    it stands: the counts' flat run long enough (its censuses coming at the rate they came, ``k``
    calls a reading), and the interval of bytes in use under its share of the tolerance (its
    half-width shrinks as ``n^-1.5``); where RSS does not agree, live memory's interval under the
    tolerance instead. inf when the evidence disagrees: RSS grows past the tolerance with live
    memory not read or growing like a leak, the last census rose, bytes in use rise or are not read."""
    from trainguard.leaks._native import KEY

    est = memory.slope
    if flat is None or flat.censuses < 2 or est is None:
        return math.inf
    per_census = flat.calls / (flat.censuses - 1)
    extra_calls = max(FLAT_MIN_CALLS - flat.calls, (FLAT_MIN_CENSUSES - flat.censuses) * per_census, 0.0)
    need = len(series) + extra_calls / max(k, 1)
    if not stats.rss_allows_flat(est, alpha=alpha, tolerance=tolerance):
        # where RSS does not agree, live memory's own interval (flat_decision's other branch)
        live = live_decision(series, alpha=alpha, tolerance=tolerance)
        if live is None or live.verdict is Verdict.LEAK:
            return math.inf
        return max(need, readings_needed(live, len(series), tolerance))
    pairs = [(r["iteration"], r[KEY]) for r in series if r.get(KEY) is not None]
    if len(pairs) < COUNT_CONFIRM_POINTS:
        return math.inf if not pairs else max(need, COUNT_CONFIRM_POINTS)
    xs, ys = np.array(pairs, dtype=float).T
    warm = stats.detect_warmup(ys, xs)
    strict = stats.robust_slope(ys[warm:], xs[warm:], confidence=1.0 - 2.0 * alpha)
    want = FLAT_ALLOCATOR_SHARE * tolerance
    if strict.ci_high < want:
        return need
    if strict.slope >= want or not math.isfinite(strict.ci_high):
        return math.inf
    m = len(ys) - warm
    return max(need, warm + m * ((strict.ci_high - strict.slope) / (want - strict.slope)) ** (2.0 / 3.0))


def _flat_head(in_use: str, flat: Any) -> str:
    return (
        f"exact evidence says no leak: every counted kind ({flat.kinds}) exactly flat, 0 a call, at "
        f"{flat.censuses} censuses over the {flat.calls} calls since call {flat.from_iteration}; {in_use}"
    )


def _fmt_signed(value: float) -> str:
    from trainguard.units import format_bytes

    return format_bytes(value, signed=True)


def _flat_reason(est: stats.SlopeEstimate, in_use: stats.SlopeEstimate, flat: Any, tolerance: float) -> str:
    """What a ``no_leak`` from exact evidence rests on, in words: the three series and their figures."""
    fmt = _fmt_signed
    return _flat_head(
        f"the allocator's bytes in use {fmt(in_use.slope)}/iter (CI up to {fmt(in_use.ci_high)}), under a "
        f"quarter of the tolerance {fmt(tolerance)}/iter; and RSS {fmt(est.slope)}/iter "
        f"(CI {fmt(est.ci_low)} .. {fmt(est.ci_high)}), under the tolerance, within "
        f"{stats.FLAT_RSS_CAP:g} tolerances each side",
        flat,
    )


def _live_reason(est: stats.SlopeEstimate, live: stats.SlopeEstimate, flat: Any, tolerance: float) -> str:
    """The same, where live memory (bytes in use plus RSS outside glibc's heaps) agreed and RSS as
    a whole did not: what RSS did inside the heaps is named as the allocator's."""
    fmt = _fmt_signed
    return _flat_head(
        f"live memory (the allocator's bytes in use plus RSS outside glibc's heaps) {fmt(live.slope)}/iter "
        f"(CI {fmt(live.ci_low)} .. {fmt(live.ci_high)}), under the tolerance {fmt(tolerance)}/iter. RSS as a "
        f"whole {fmt(est.slope)}/iter (CI {fmt(est.ci_low)} .. {fmt(est.ci_high)}): what it gained or swung "
        "beyond that is inside malloc's heaps, free memory the allocator keeps (retention or fragmentation; "
        "pages malloc_trim gave back, touched again), not live allocations; jemalloc keeps RSS "
        "flatter (`trainguard run --allocator jemalloc` in workers)",
        flat,
    )


def look(
    config: Any,
    plan: Plan,
    series: list[dict[str, Any]],
    *,
    iterations: int,
    elapsed_s: float,
    step_time_s: float,
    final: bool,
    key: str,
    count_support: bool = False,
    flat_support: Any = None,
) -> LookResult:
    """One look of the sequential test at the readings so far.

    ``count_support``: exact counts of some kind grow like a leak (see
    :func:`trainguard.leaks._evidence.count_support`); a leak then need not wait for the warm-up
    gate nor pass the strict recent-third test, only the memory series' own test.
    ``flat_support``: how long every counted kind has stayed exactly flat (an
    ``_evidence.FlatCounts``; None without usable counts): with bytes in use and RSS agreeing it
    may give ``no_leak`` before RSS's interval is under the tolerance (:func:`flat_decision`).
    Stops on a leak (host or GPU), when every series
    decided, or at the final look.
    """
    base_gate = config.min_iterations or BASE_MIN_ITERATIONS
    flat_readings = math.inf
    gate = leak_gate(
        config,
        iterations=iterations,
        elapsed_s=elapsed_s,
        step_time_s=step_time_s,
        gate_iterations=plan.leak_gate_iterations,
    )
    leak_ok = iterations >= gate or (count_support and iterations >= base_gate)
    # the strict test stands in for the warm-up wait; count evidence answers the same question
    # (a count that keeps rising at the same rate past any cache's size is no warm-up)
    strong = strong_needed(config, iterations, plan.leak_gate_iterations) and not count_support
    gates = (iterations >= base_gate, leak_ok, strong)
    alpha, tol = plan.alpha_per_look, plan.tolerance_bytes_per_iter
    decision = decide_series(series, key, alpha, tol, final, *gates)
    if count_support and decision.verdict is None and not final:
        # the count test has paid for the looks (its level is this look's, split over the kinds):
        # memory only has to confirm that the objects hold memory, at the check's own level, over
        # fewer settled readings, and with the lag-1 rule alone: over 8-15 readings the long-run
        # estimate's 4-6 degrees of freedom ask about 20 % more growth of it at the 1 % level,
        # which delayed kept torch losses from call 15 to 18-27 in 3 of 16 runs
        confirm = decide_series(
            series, key, config.alpha, tol, final, *gates, min_points=COUNT_CONFIRM_POINTS, long_run=False
        )
        if confirm.verdict is Verdict.LEAK:
            decision = confirm
    if decision.verdict is Verdict.LEAK and not count_support:
        # RSS alone grows: where live memory is read, growth inside glibc's heaps is never a leak
        decision = retention_hold(
            series, decision, alpha=alpha, tolerance=tol, final=final, gates=gates, words=plan.live_words
        )
    if decision.verdict is Verdict.LEAK and not count_support:
        decision = warmup_hold(decision, plan, iterations=iterations, elapsed_s=elapsed_s, final=final)
    if (
        flat_support is not None
        and not count_support
        and decision.verdict in (None, Verdict.INCONCLUSIVE)
        and iterations >= base_gate
    ):
        # at the final look too: a budget that ends as the exact evidence completes still decides
        flat = flat_decision(series, key, decision, alpha=alpha, tolerance=tol, flat=flat_support)
        if flat is None and final:
            k = plan.calls_per_measurement
            flat_readings = flat_readings_needed(
                series, decision, flat_support, alpha=alpha, tolerance=tol, k=k
            )
        decision = flat or decision
    gpu_decision = None
    if plan.gpu_key is not None:
        gpu_decision = decide_series(series, plan.gpu_key, alpha, tol, final, *gates)
    verdicts = [decision.verdict] + ([gpu_decision.verdict] if gpu_decision is not None else [])
    stop = final or Verdict.LEAK in verdicts or all(v is not None for v in verdicts)
    return LookResult(decision, gpu_decision, stop, gate, flat_readings)


def warmup_hold(
    memory: stats.Decision, plan: Plan, *, iterations: int, elapsed_s: float, final: bool
) -> stats.Decision:
    """A ``leak`` from memory alone within the engine's warm-up (``plan.warmup_calls``), which a
    short budget's lowered gate (:func:`leak_gate`) does not wait out: it stands only where its
    interval clears ``plan.warmup_leak_bytes`` a call, more than the warm-up itself grows. Else the
    look waits, and the final look is ``inconclusive`` with the budget that reaches past the warm-up.

    V8 grows a clean TF.js fit step's RSS by 22-37 KiB a call over its first 100 calls: a 2-second
    budget (a gate lowered to 60 calls) called examples/tfjs's disposed step a leak in 7 of 8 runs."""
    est = memory.slope
    if iterations >= plan.warmup_calls or est is None or est.ci_low > plan.warmup_leak_bytes:
        return memory
    grows = f"memory grows {_fmt_signed(est.slope)}/iter (CI {_fmt_signed(est.ci_low)} .. {_fmt_signed(est.ci_high)})"
    if not final:
        return replace(memory, verdict=None, reason=f"{grows}; waiting past the engine's warm-up")
    calls = math.ceil(plan.warmup_calls / LEAK_GATE_BUDGET_SHARE)
    seconds = math.ceil(1.2 * elapsed_s * calls / max(iterations, 1))
    return replace(
        memory,
        verdict=Verdict.INCONCLUSIVE,
        reason=(
            f"{grows} over the first {iterations} calls, within the engine's warm-up (V8 compiles the "
            f"step's code and grows its heap over the first {plan.warmup_calls} calls; before then memory "
            f"alone calls a leak only above {_fmt_signed(plan.warmup_leak_bytes)}/iter): not called a leak; "
            f"raise max_time: {_max_time_flag(seconds)} would give about {calls} calls"
        ),
    )


def past_max_time(config: Any, *, iterations: int, elapsed_s: float, next_block_s: float) -> bool:
    """Whether the loop goes on past ``max_time`` because it has not made ``min_calls`` calls yet:
    a slow step (a Keras fit of seconds, on a loaded machine) gets a budget in calls, so that its
    evidence (15 flat calls and 4 censuses, 8 settled readings) can decide rather than end
    ``inconclusive`` after the 8 calls two minutes gave."""
    if config.max_time_s is None or config.min_calls is None:
        return False
    return elapsed_s + next_block_s > config.max_time_s and iterations < config.min_calls


def past_max_time_note(config: Any, *, iterations: int, step_time_s: float) -> str:
    """The progress line said once when the loop goes on past ``max_time``."""
    from trainguard.units import format_duration

    left = max(0, (config.min_calls or 0) - iterations)
    return (
        f"max_time ({format_duration(config.max_time_s)}) is spent after {iterations} calls of "
        f"{format_duration(step_time_s)} with no verdict: going on until the evidence decides, at most "
        f"{config.min_calls} calls (about {format_duration(left * step_time_s)} more; --min-calls sets it)"
    )


#: Readings below which no verdict is given: the warm-up cut and the slope's noise estimate need
#: them (with 4 readings, a step that does nothing was called a leak at +135 KiB/iter "after 0
#: warm-up iterations": the first calls' allocations were the whole slope).
MIN_VERDICT_READINGS = 8


def budget_hint(elapsed_s: float | None, readings: int, needed_readings: float) -> str:
    """``"; --max-time 3m would ..."``: the time budget that gives ``needed_readings`` at the rate
    the readings so far came (empty when that cannot be estimated)."""
    if not elapsed_s or readings < 2 or not math.isfinite(needed_readings):
        return ""
    seconds = math.ceil(1.2 * elapsed_s * needed_readings / max(readings - 1, 1))
    return f"; {_max_time_flag(seconds)} would give {math.ceil(needed_readings)} readings"


def _max_time_flag(seconds: float) -> str:
    """``--max-time 3m40s``: a budget as the command line takes it."""
    from trainguard.units import format_duration

    return f"--max-time {format_duration(float(seconds)).replace(' ', '')}"


def readings_needed(decision: stats.Decision, readings: int, tolerance: float) -> float:
    """Readings after which the interval of ``decision``'s slope would fall under ``tolerance``
    (its half-width shrinks as ``n^-1.5`` for evenly spaced readings); inf when the slope itself
    is at or above the tolerance."""
    est = decision.slope
    if est is None or not math.isfinite(est.ci_high) or est.slope >= tolerance or est.ci_high <= tolerance:
        return math.inf
    half_now, half_want = est.ci_high - est.slope, tolerance - est.slope
    return readings * (half_now / half_want) ** (2.0 / 3.0)


def final_verdict(
    decision: stats.Decision,
    gpu_decision: stats.Decision | None,
    error: Any,
    *,
    iterations: int,
    readings: int,
    step_times: Any,
    elapsed_s: float | None = None,
    tolerance: float | None = None,
    flat_readings: float = math.inf,
) -> tuple[Verdict, str]:
    """The verdict and reason reported: the host decision, a GPU leak over a host non-leak, a
    step error (inconclusive unless a leak was already clear), or too few readings
    (:data:`MIN_VERDICT_READINGS`). Where the budget did not reach a verdict, the reason says what
    ``--max-time`` would (from ``elapsed_s`` and ``tolerance`` when given): the time for RSS's own
    interval, or for exact evidence (``flat_readings``, :func:`flat_readings_needed`) when sooner."""
    verdict = decision.verdict or Verdict.INCONCLUSIVE
    reason = decision.reason
    if gpu_decision is not None and gpu_decision.verdict is Verdict.LEAK and verdict is not Verdict.LEAK:
        verdict, reason = Verdict.LEAK, f"GPU memory: {gpu_decision.reason}"
    if error is not None:
        if verdict is Verdict.LEAK:
            return verdict, reason + f"; then the step raised {error.exc_type} at iteration {error.iteration}"
        after = f" (after {iterations} iterations: {reason})" if iterations else ""
        return Verdict.INCONCLUSIVE, (
            f"the step raised {error.exc_type} at iteration {error.iteration}: {error.message}" + after
        )
    if iterations < 3 or readings < MIN_VERDICT_READINGS:
        from trainguard.units import format_duration

        median = None
        if len(step_times):
            median = step_times.median() if hasattr(step_times, "median") else float(np.median(step_times))
        return Verdict.INCONCLUSIVE, (
            f"only {iterations} iterations and {readings} readings fit in the budget (one call takes "
            f"{format_duration(median)}): a verdict needs at least {MIN_VERDICT_READINGS} readings; "
            "raise max_time or max_iterations" + budget_hint(elapsed_s, readings, MIN_VERDICT_READINGS)
        )
    if verdict is Verdict.INCONCLUSIVE and tolerance is not None:
        needed = readings_needed(decision, readings, tolerance)
        if flat_readings < needed:
            reason += budget_hint(elapsed_s, readings, flat_readings) + (
                " (counts exactly flat and bytes in use flat so far: with that many, exact evidence "
                "would decide no_leak)"
            )
        else:
            reason += budget_hint(elapsed_s, readings, needed)
    return verdict, reason
