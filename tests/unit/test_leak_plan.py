"""The leak loop's decisions (trainguard.leaks._plan) driven with synthetic readings.

These are the functions the loop itself calls, so the gates tested here are the real ones: no copy
of the 120-call gate lives in the tests.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainguard.leaks import _plan
from trainguard.leaks._report import StepError
from trainguard.leaks._run import make_config
from trainguard.leaks.stats import Verdict

MB = 1024.0 * 1024.0


def rows(ys: np.ndarray, k: int = 1) -> list[dict]:
    return [{"iteration": i * k, "bytes": float(y), "elapsed_s": 0.0} for i, y in enumerate(ys)]


def run_looks(ys: np.ndarray, config, *, step_time_s: float, k: int = 1) -> tuple[Verdict, int]:
    """Feed readings one at a time exactly as the loop does: calibrate after 3, look on the
    schedule or when the budget is spent; return the verdict and the calls it came at."""
    series: list[dict] = []
    plan = None
    for i, y in enumerate(ys):
        series.append({"iteration": i * k, "bytes": float(y)})
        iterations = i * k
        elapsed = iterations * step_time_s
        if plan is None and len(series) >= 3:
            plan = _plan.calibrate(
                config,
                series,
                iterations=iterations,
                measure_cost_s=0.001,
                step_time_s=step_time_s,
                elapsed_s=elapsed,
            )
        final = i == len(ys) - 1 or _plan.out_of_budget(
            config, series, iterations=iterations, elapsed_s=elapsed, next_block_s=step_time_s
        )
        if plan is None or not (final or len(series) in plan.schedule):
            continue
        res = _plan.look(
            config,
            plan,
            series,
            iterations=iterations,
            elapsed_s=elapsed,
            step_time_s=step_time_s,
            final=final,
            key="bytes",
        )
        if res.stop:
            return res.decision.verdict or Verdict.INCONCLUSIVE, iterations
    raise AssertionError("the final look always stops")


def test_leak_gate_is_120_calls_when_the_budget_allows_and_lower_for_slow_steps() -> None:
    config = make_config(max_time="2m")
    assert _plan.leak_gate(config, iterations=5, elapsed_s=0.05, step_time_s=0.01) == 120
    # 2 s a call: 60 % of the budget, which is at least min_calls (100) calls: 60 calls
    assert _plan.leak_gate(config, iterations=5, elapsed_s=10.0, step_time_s=2.0) == 60
    # max_time alone (min_calls=None): 60 % of 120 s is 36 calls
    alone = make_config(max_time="2m", min_calls=None)
    assert _plan.leak_gate(alone, iterations=5, elapsed_s=10.0, step_time_s=2.0) == 36
    assert (
        _plan.leak_gate(
            make_config(max_iterations=50, max_time=None), iterations=5, elapsed_s=0, step_time_s=1
        )
        == 50
    )
    assert _plan.leak_gate(make_config(min_iterations=7), iterations=0, elapsed_s=0, step_time_s=1) == 7
    assert _plan.strong_needed(config, 119) and not _plan.strong_needed(config, 120)


def test_a_steady_leak_waits_for_the_real_gate_then_is_called() -> None:
    rng = np.random.default_rng(0)
    ys = 500 * MB + 1 * MB * np.arange(201) + rng.normal(0, 1 * MB, 201)
    verdict, calls = run_looks(ys, make_config(max_iterations=200, max_time=None), step_time_s=0.01)
    assert verdict is Verdict.LEAK
    assert calls >= _plan.LEAK_GATE_ITERATIONS


def test_a_linear_ramp_of_80_calls_is_not_a_leak_with_the_real_gate() -> None:
    # a warm-up that grows linearly for 80 calls and then stops, with no slowing down to warn
    t = np.arange(201.0)
    config = make_config(max_iterations=200, max_time=None)
    verdicts = []
    for s in range(30):
        ys = 500 * MB + 0.5 * MB * np.minimum(t, 80) + np.random.default_rng(s).normal(0, 2 * MB, t.size)
        verdicts.append(run_looks(ys, config, step_time_s=0.01)[0])
    assert sum(v is Verdict.LEAK for v in verdicts) <= 1, verdicts


def test_calibration_batches_fast_steps_and_plans_the_looks() -> None:
    config = make_config(max_time="2m")
    series = rows(np.full(3, 500 * MB))
    plan = _plan.calibrate(
        config, series, iterations=2, measure_cost_s=0.01, step_time_s=0.0001, elapsed_s=0.1
    )
    # reading costs 10 ms, a call 0.1 ms: 2.5 % overhead needs 4000 calls per reading
    assert plan.calls_per_measurement == 4000
    assert plan.schedule[0] == config.min_measurements
    assert plan.tolerance_bytes_per_iter == pytest.approx(_plan.auto_tolerance(0.0001, 4000))
    assert plan.gpu_key is None
    series[0]["gpu_allocated_bytes"] = 10
    assert _plan.calibrate(
        config, series, iterations=2, measure_cost_s=0.01, step_time_s=0.0001, elapsed_s=0.1
    ).gpu_key


def test_final_verdict_step_error_and_too_few_iterations() -> None:
    rng = np.random.default_rng(1)
    d = _plan.decide_series(rows(500 * MB + rng.normal(0, 1e5, 30)), "bytes", 0.001, 1024, True, True)
    err = StepError(iteration=7, exc_type="ValueError", message="boom", traceback="")
    verdict, reason = _plan.final_verdict(d, None, err, iterations=6, readings=30, step_times=[0.1])
    assert verdict is Verdict.INCONCLUSIVE and "ValueError at iteration 7" in reason
    verdict, reason = _plan.final_verdict(d, None, None, iterations=2, readings=3, step_times=[0.1])
    assert verdict is Verdict.INCONCLUSIVE and "only 2 iterations" in reason
    assert _plan.final_verdict(d, None, None, iterations=30, readings=30, step_times=[0.1])[0] is d.verdict


def test_reading_call_by_call_lasts_while_counts_rise_within_its_budget() -> None:
    config = make_config(max_time="2m")
    assert _plan.dense_next(config, iterations=2, rising=False, spent_s=0.0, budget_s=120.0)
    assert not _plan.dense_next(config, iterations=10, rising=False, spent_s=0.0, budget_s=120.0)
    assert _plan.dense_next(config, iterations=100, rising=True, spent_s=1.0, budget_s=120.0)
    assert not _plan.dense_next(
        config, iterations=_plan.DENSE_MAX_CALLS, rising=True, spent_s=0, budget_s=120
    )
    # its extra readings and censuses have spent their share of the budget
    assert not _plan.dense_next(config, iterations=10, rising=True, spent_s=6.0, budget_s=120.0)
    # counts off, or a batch size given: never
    off = make_config(max_time="2m", attribution=False)
    assert not _plan.dense_next(off, iterations=0, rising=True, spent_s=0, budget_s=120)
    given = make_config(max_time="2m", calls_per_measurement=5)
    assert not _plan.dense_next(given, iterations=0, rising=True, spent_s=0, budget_s=120)


def test_censuses_while_reading_call_by_call_are_spread_to_fit_the_budget() -> None:
    assert _plan.dense_census_gap(0.002, 120.0) == 1
    # a Keras TF census of 0.4 s on a 2-minute budget: every second call
    assert _plan.dense_census_gap(0.4, 120.0) == 2
    assert _plan.dense_census_gap(2.0, 120.0) == 6
    assert _plan.dense_census_gap(0.0, 120.0) == 1


def test_thinning_keeps_readings_k_calls_apart_and_the_last() -> None:
    series = rows(np.arange(21.0))  # calls 0..20, one reading each
    kept = _plan.thin(series, 6)
    assert [r["iteration"] for r in kept] == [0, 1, 2, 8, 14, 20]
    assert _plan.thin(series, 1) == series


def test_the_schedule_looks_before_call_20_and_again_after_the_dense_phase() -> None:
    config = make_config(max_time="2m")
    series = rows(np.full(3, 500 * MB))
    plan = _plan.calibrate(config, series, iterations=2, measure_cost_s=0.001, step_time_s=0.5, elapsed_s=1)
    assert {16, 17, 19} <= set(plan.schedule)
    again = _plan.calibrate(
        config,
        rows(np.full(25, 500 * MB)),
        iterations=24,
        measure_cost_s=0.001,
        step_time_s=0.5,
        elapsed_s=12,
        looks_done=5,
    )
    assert again.schedule[0] == 26
    assert again.alpha_per_look == pytest.approx(0.01 / (2 * (len(again.schedule) + 1 + 5)))


def test_count_support_lets_memory_confirm_a_leak_at_16_calls() -> None:
    """20 KiB a call over 16 calls: memory alone waits for the 120-call gate; with counts
    supporting, memory confirms at the check's own level and the leak is called now."""
    rng = np.random.default_rng(3)
    t = np.arange(17.0)
    ys = 400 * MB + 20 * 1024 * t + rng.normal(0, 4096, t.size)
    config = make_config(max_time="2m")
    series = rows(ys)
    plan = _plan.calibrate(
        config, series[:3], iterations=2, measure_cost_s=0.001, step_time_s=0.5, elapsed_s=1
    )
    args = dict(iterations=16, elapsed_s=8.0, step_time_s=0.5, final=False, key="bytes")
    assert _plan.look(config, plan, series, count_support=True, **args).decision.verdict is Verdict.LEAK
    assert _plan.look(config, plan, series, count_support=False, **args).decision.verdict is None


def test_planning_again_after_the_dense_phase_keeps_the_first_batch_size() -> None:
    """The call-by-call readings cost more (a PSS walk each once a DataLoader has workers): planned
    from them, a fast step was batched 6 times coarser and its leak was read only after it stopped."""
    config = make_config(max_time="2m")
    series = rows(np.full(8, 500 * MB))
    plan = _plan.calibrate(
        config,
        series,
        iterations=7,
        measure_cost_s=0.05,
        step_time_s=0.001,
        elapsed_s=1,
        looks_done=2,
        calls_per_measurement=108,
    )
    assert plan.calls_per_measurement == 108


def test_default_tolerance_covers_the_checks_own_bookkeeping_per_reading() -> None:
    """A flat 0.1 s step read after every call grew +1.2-1.7 KiB a call from the check's own rows
    (measured on bench/leak_corpus/flat_big_temporaries.py): the default tolerance must be above
    that when read every call, and fall back towards the 1 KiB floor when readings are batched."""
    every_call = _plan.auto_tolerance(0.1, 1)
    assert every_call >= 1024 + 1.4 * 1024 * 1.25  # the measured 1.4 KiB a reading, with margin
    assert _plan.auto_tolerance(0.1, 100) < 1.1 * 1024 + 1024 * 1024 * 0.1 / 60
    assert _plan.auto_tolerance(0.1, 100) < every_call
    # slow steps: 1 MiB per minute of step time dominates whatever the reading rate
    assert _plan.auto_tolerance(6.0, 1) == pytest.approx(1024 * 1024 * 0.1)
    # very fast steps keep the 64 MiB per minute cap
    assert _plan.auto_tolerance(50e-6, 1) == pytest.approx(64 * 1024 * 1024 * 50e-6 / 60)


def _node_plan(config, series):
    """The plan a Node step gets: V8's warm-up as ``_node`` sets it, which no budget shortens."""
    from trainguard.leaks import _node

    plan = _plan.calibrate(
        config, series[:3], iterations=2, measure_cost_s=0.001, step_time_s=0.02, elapsed_s=0.1
    )
    return dataclasses.replace(
        plan, warmup_calls=_node.NODE_WARMUP_CALLS, warmup_leak_bytes=_node.NODE_WARMUP_LEAK_BYTES
    )


def test_a_short_budget_does_not_call_an_engines_warm_up_a_leak() -> None:
    """A 2-second budget lowers the leak gate to 60 calls; V8's warm-up grows a clean TF.js step's
    RSS 22-37 KiB a call for its first 300: memory alone within it is inconclusive at the final
    look, with the budget that gets past it; a leak ten times the warm-up's growth still is one."""
    rng = np.random.default_rng(5)
    t = np.arange(101.0)
    config = make_config(max_time="2s")
    warm = rows(400 * MB + 30 * 1024 * t + rng.normal(0, 8192, t.size))
    plan = _node_plan(config, warm)
    args = dict(iterations=100, elapsed_s=2.0, step_time_s=0.02, key="bytes")
    without = dataclasses.replace(plan, warmup_calls=0)
    assert _plan.look(config, without, warm, final=True, **args).decision.verdict is Verdict.LEAK
    waits = _plan.look(config, plan, warm, final=False, **args).decision
    assert waits.verdict is None and "warm-up" in waits.reason
    held = _plan.look(config, plan, warm, final=True, **args).decision
    assert held.verdict is Verdict.INCONCLUSIVE, held.reason
    assert (
        "within the engine's warm-up" in held.reason
        and "--max-time 12.0s would give about 500 calls" in held.reason
    )
    big = rows(400 * MB + 300 * 1024 * t + rng.normal(0, 8192, t.size))
    assert _plan.look(config, plan, big, final=True, **args).decision.verdict is Verdict.LEAK
    # past the warm-up the ordinary gates decide, and count evidence never waits for it
    assert (
        _plan.look(config, plan, warm, final=True, **{**args, "iterations": 300}).decision.verdict
        is Verdict.LEAK
    )
    counted = _plan.look(config, plan, warm, final=True, count_support=True, **args).decision
    assert counted.verdict is Verdict.LEAK


def test_python_plans_have_no_engine_warm_up() -> None:
    config = make_config(max_time="2m")
    plan = _plan.calibrate(
        config, rows(np.zeros(3)), iterations=2, measure_cost_s=0.001, step_time_s=0.02, elapsed_s=0.1
    )
    assert plan.warmup_calls == 0
