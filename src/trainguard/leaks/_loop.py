"""What the Python leak loop (:mod:`trainguard.leaks._run`) and the Node one
(:mod:`trainguard.leaks._node`) share: the loop itself (call a block, read, look), the block size,
the look and its progress event, the decisions reported at the end, and the slope fields of the
report. Each loop supplies how it calls the step and reads memory; the decisions are the pure
functions of :mod:`trainguard.leaks._plan`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from trainguard.leaks import _plan, stats
from trainguard.leaks._report import StepError

__all__ = ["LoopBase", "StepTimes", "analysis_dict", "settled_slope"]


class StepTimes:
    """Step call times in fixed memory: the total, the count and the last ``keep`` calls.

    A list of every call's time grew the measured process by about 40 B a call (a float and its
    slot), which a flat sub-millisecond step read every few thousand calls showed as a leak of
    +42-45 B a call against a tolerance of about 24 B. This keeps a ring of recent times instead,
    so the check's own memory per call is nothing; medians are over the ring.
    """

    def __init__(self, keep: int = 4096) -> None:
        self._ring = np.zeros(keep, dtype=float)
        self._n = 0
        self.total_s = 0.0

    def append(self, seconds: float) -> None:
        self._ring[self._n % self._ring.size] = seconds
        self._n += 1
        self.total_s += seconds

    def extend(self, values: Any) -> None:
        for v in values:
            self.append(float(v))

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def recent(self, count: int | None = None) -> np.ndarray:
        """The last ``count`` times kept (all kept when None), oldest first."""
        kept = min(self._n, self._ring.size)
        count = kept if count is None else min(count, kept)
        idx = (np.arange(self._n - count, self._n)) % self._ring.size
        return self._ring[idx]

    def median(self, count: int | None = None) -> float:
        return float(np.median(self.recent(count))) if self._n else 0.0


def _warm_up_statistics(readings: int) -> None:
    """Run a look's statistics once on a made-up series as long as the check's longest (``readings``,
    its ``max_measurements``), so that what numpy and scipy allocate on first use (about 1.3 MiB
    here), and the largest working set a look needs, are allocated before the check's first reading
    instead of showing in its series as the step's growth: a 200 KB-a-call step read +300 KiB a
    call over 15 calls without the warm-up; a no-op step read after every call (no census, no
    allocator evidence) grew 1.59-1.64 KiB a call with a 24-reading warm-up (each look's temporaries
    a little larger than the last) and 0.86-0.90 with this one, the readings' own rows
    (tests/integration/test_leak_self_growth.py). About 35 ms at 300 readings."""
    x = np.arange(float(max(readings, 24)))
    y = 1e6 + 2e5 * x + 1e3 * np.sin(x)
    for strong in (False, True):
        stats.decide(y, x, alpha=0.01, tolerance=1e4, strong=strong)
    stats.decide(y, x, alpha=0.01, tolerance=1e4, final=True)
    stats.plateau_test(y, x, tolerance=1e4)
    stats.count_trend(np.arange(x.size) * 3, x, alpha=0.01)
    stats.allocator_trend(y, x, alpha=0.01, tolerance=1e4)


class LoopBase:
    """One leak check's state and the phases both loops share. A subclass gives ``call_block``
    (call the step; False when it raised), ``measure`` (append a reading to ``series``),
    ``after_measure`` (calibrate when due), ``calibrate`` (make ``plan``), ``dense_rising`` (what
    keeps the call-by-call phase going) and may change ``host_key`` and ``count_support``."""

    def __init__(
        self,
        config: Any,
        progress: Callable[[dict[str, Any]], None] | None,
        series: list[dict[str, Any]],
    ) -> None:
        self.config, self.progress, self.series = config, progress, series
        self.step_times = StepTimes()
        self.error: StepError | None = None
        self.iterations = 0
        self.measure_cost = 0.0
        self.plan: _plan.Plan | None = None
        self.last_look: _plan.LookResult | None = None
        self.last_progress = 0.0
        self.start = 0.0
        self.looks_done = 0
        #: the call at which the loop went on past max_time for min_calls (None: it did not)
        self.past_max_time_at: int | None = None
        #: reading after every call while counts may give evidence soon (``_plan.dense_next``)
        self.dense = _plan.dense_next(config, iterations=0, rising=True, spent_s=0.0, budget_s=0.0)
        self.dense_spent = 0.0

    # -- what a loop gives -----------------------------------------------------------------------

    def call_block(self) -> bool:
        raise NotImplementedError

    def measure(self) -> None:
        raise NotImplementedError

    def after_measure(self) -> None:
        """After each reading in the loop, before the look: calibrate when due."""

    def calibrate(self, looks_done: int = 0, k: int | None = None) -> None:
        """Make ``plan`` from the readings so far (``k``: the batch size the readings were thinned to)."""
        raise NotImplementedError

    def dense_rising(self) -> bool:
        """Whether the counts that keep the call-by-call phase going still rise."""
        raise NotImplementedError

    def host_key(self, final: bool) -> str:
        """The series key the host verdict is decided on."""
        return "bytes"

    def count_support(self, key: str) -> bool:
        """Whether object counts support a leak at this look."""
        return False

    def flat_support(self) -> Any:
        """How long exact counts have stayed flat (an ``_evidence.FlatCounts``), or None when the
        loop has no counts that can speak for ``no_leak`` (asked after count_support)."""
        return None

    # -- shared ----------------------------------------------------------------------------------

    def loop(self) -> None:
        """Read, then call a block and read until a look says stop or the budget or the step ends."""
        # the check's own first-use allocations and largest look, before its first reading
        _warm_up_statistics(self.config.max_measurements)
        self.start = time.perf_counter()
        self.measure()
        while True:
            if not self.call_block():
                if self.iterations > int(self.series[-1]["iteration"]):
                    self.measure()
                break
            self.measure()
            self.after_measure()
            if self.after_reading():
                break

    def block_size(self) -> int:
        """Calls before the next reading: one in the call-by-call phase, else the plan's batch (or
        the configured one before there is a plan), within ``max_iterations``."""
        block = self.plan.calls_per_measurement if self.plan else (self.config.calls_per_measurement or 1)
        if self.config.max_iterations is not None:
            block = min(block, self.config.max_iterations - self.iterations)
        return min(int(block), 1) if self.dense else int(block)

    def budget_s(self) -> float:
        """Step time the whole check may spend: max_time, or max_iterations calls."""
        if self.config.max_time_s is not None:
            return float(self.config.max_time_s)
        return (self.config.max_iterations or 0) * self.step_time()

    def end_dense_if_due(self) -> None:
        """Leave the call-by-call phase once counts stop rising, its budget is spent or it has
        lasted DENSE_MAX_CALLS calls: the readings taken so far are thinned to the batch size the
        plan chose and the plan (batching, looks) is made again from here."""
        self.dense = _plan.dense_next(
            self.config,
            iterations=self.iterations,
            rising=self.dense_rising(),
            spent_s=self.dense_spent,
            budget_s=self.budget_s(),
        )
        if self.dense or self.plan is None:
            return
        k = self.plan.calls_per_measurement
        if k > 1:
            self.series[:] = _plan.thin(self.series, k)
        self.calibrate(looks_done=self.looks_done, k=k)

    def step_time(self) -> float:
        return self.step_times.median(50)

    def after_reading(self) -> bool:
        """Progress, and a look when the schedule says so; True when the loop must stop."""
        elapsed = time.perf_counter() - self.start
        k = self.plan.calls_per_measurement if self.plan else 1
        next_block_s = k * self.step_time() + self.measure_cost
        final, looks_now = _plan.look_due(
            self.config,
            self.plan,
            self.series,
            iterations=self.iterations,
            elapsed_s=elapsed,
            next_block_s=next_block_s,
        )
        self.note_past_max_time(elapsed, next_block_s)
        self.report_progress(elapsed, k, looks_now)
        if not looks_now or self.plan is None:
            return final
        self.looks_done += 1
        key = self.host_key(final)
        self.last_look = _plan.look(
            self.config,
            self.plan,
            self.series,
            iterations=self.iterations,
            elapsed_s=elapsed,
            step_time_s=self.step_time(),
            final=final,
            key=key,
            count_support=self.count_support(key),
            flat_support=self.flat_support(),
        )
        return self.last_look.stop

    def note_past_max_time(self, elapsed: float, next_block_s: float) -> None:
        """Say once (a progress event with a ``note``) that the loop goes on past max_time."""
        if self.past_max_time_at is not None or not _plan.past_max_time(
            self.config, iterations=self.iterations, elapsed_s=elapsed, next_block_s=next_block_s
        ):
            return
        self.past_max_time_at = self.iterations
        if self.progress is not None:
            note = _plan.past_max_time_note(
                self.config, iterations=self.iterations, step_time_s=self.step_time()
            )
            event = _plan.progress_event(self.series, iterations=self.iterations, elapsed_s=elapsed, k=1)
            self.progress({**event, "note": note})

    def report_progress(self, elapsed: float, k: int, looks_now: bool) -> None:
        if self.progress is None or (time.perf_counter() - self.last_progress <= 0.5 and not looks_now):
            return
        self.last_progress = time.perf_counter()
        self.progress(_plan.progress_event(self.series, iterations=self.iterations, elapsed_s=elapsed, k=k))

    def report_fields(
        self, series: list[dict[str, Any]], tolerance: float, alpha: float, elapsed_s: float
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """What both loops' reports say alike of the check: ``LeakReport`` fields (calls, readings
        of the reported ``series``, tolerance, time, the step's median time) and the first keys of
        its ``extra`` (the levels, the looks planned, the metric asked for, the call from which it
        went on past max_time)."""
        fields = {
            "iterations": self.iterations,
            "measurements": len(series),
            "tolerance_bytes_per_iter": float(tolerance),
            "elapsed_s": elapsed_s,
            "step_time_s": self.step_times.median() if self.step_times else None,
            "series": tuple(series),
        }
        extra = {
            "alpha": self.config.alpha,
            "alpha_per_look": alpha,
            "looks": len(self.plan.schedule) + 1 if self.plan else 1,
            "metric_requested": self.config.metric,
            "past_max_time_at_call": self.past_max_time_at,
        }
        return fields, extra

    def final_decisions(self) -> tuple[stats.Decision, stats.Decision | None, float, float]:
        """The decisions reported, with the tolerance and per-look alpha they used: the last
        look's, or a final look now when there was none, it did not decide, or the step raised.
        The second decision is the plan's second series (GPU bytes, or TF.js's tensor bytes)."""
        plan = self.plan
        tolerance = plan.tolerance_bytes_per_iter if plan else None
        if tolerance is None:
            median = self.step_times.median()
            tolerance = self.config.tolerance_bytes_per_iter or _plan.auto_tolerance(median)
        alpha = plan.alpha_per_look if plan else self.config.alpha
        look = self.last_look
        if look is not None and look.decision.verdict is not None and self.error is None:
            return look.decision, look.gpu_decision, tolerance, alpha
        gate = plan.leak_gate_iterations if plan else _plan.LEAK_GATE_ITERATIONS
        strong = _plan.strong_needed(self.config, self.iterations, gate)
        args = (alpha, tolerance, True, True, True, strong)
        decision = _plan.decide_series(self.series, self.host_key(True), *args)
        if plan is not None and decision.verdict is stats.Verdict.LEAK and self.error is None:
            elapsed = self.series[-1].get("elapsed_s", 0.0) if self.series else 0.0
            decision = _plan.warmup_hold(
                decision, plan, iterations=self.iterations, elapsed_s=elapsed, final=True
            )
        second = _plan.decide_series(self.series, plan.gpu_key, *args) if plan and plan.gpu_key else None
        return decision, second, tolerance, alpha


def settled_slope(
    series: list[dict[str, Any]], decision: stats.Decision, key: str = "bytes"
) -> tuple[int, dict[str, Any]]:
    """The index where the settled part of ``series`` starts (after the decision's warm-up) and
    the report's slope fields: the robust slope with its interval, the least-squares slope over
    the settled part, and the warm-up in calls. ``key``: the series ``decision`` was made on."""
    rows = [r for r in series if r.get(key) is not None]
    xs = np.array([r["iteration"] for r in rows], dtype=float)
    ys = np.array([r[key] for r in rows], dtype=float)
    slope = decision.slope
    warm = decision.warmup_index if slope is not None else 0
    return warm, {
        "slope_bytes_per_iter": slope.slope if slope else None,
        "ci_low_bytes_per_iter": slope.ci_low if slope and math.isfinite(slope.ci_low) else None,
        "ci_high_bytes_per_iter": slope.ci_high if slope and math.isfinite(slope.ci_high) else None,
        "least_squares_bytes_per_iter": stats.least_squares_slope(ys[warm:], xs[warm:])
        if len(ys) - warm >= 2
        else None,
        "warmup_iterations": int(xs[warm]) if len(xs) else 0,
    }


def analysis_dict(d: stats.Decision) -> dict[str, Any]:
    """A decision of a second series (GPU bytes, TF.js tensor bytes) as the report keeps it."""
    s = d.slope
    return {
        "verdict": d.verdict.value if d.verdict else None,
        "reason": d.reason,
        "slope_bytes_per_iter": s.slope if s else None,
        "ci_low_bytes_per_iter": s.ci_low if s and math.isfinite(s.ci_low) else None,
        "ci_high_bytes_per_iter": s.ci_high if s and math.isfinite(s.ci_high) else None,
        "warmup_index": d.warmup_index,
    }
