"""The leak check's budget in calls (``min_calls``) and the Node loop's own gate and live series,
as pure decisions over recorded series."""

from __future__ import annotations

import numpy as np

from trainguard.leaks import _plan, make_config
from trainguard.leaks._run import default_settings
from trainguard.leaks.stats import Verdict


def test_max_time_ends_the_loop_only_after_min_calls():
    config = make_config(max_time="2m")  # min_calls 100: the default
    assert config.min_calls == 100 and default_settings()["min_calls"] == 100
    series = [{"iteration": 0, "bytes": 1e8}]
    # a 15 s step: 8 calls in two minutes, and the loop goes on
    assert not _plan.out_of_budget(config, series, iterations=8, elapsed_s=120.0, next_block_s=15.0)
    assert _plan.past_max_time(config, iterations=8, elapsed_s=120.0, next_block_s=15.0)
    assert _plan.out_of_budget(config, series, iterations=100, elapsed_s=1500.0, next_block_s=15.0)
    # max_iterations stays a hard cap; min_calls=None is max_time alone
    capped = make_config(max_time="2m", max_iterations=20)
    assert _plan.out_of_budget(capped, series, iterations=20, elapsed_s=300.0, next_block_s=15.0)
    alone = make_config(max_time="2m", min_calls=None)
    assert _plan.out_of_budget(alone, series, iterations=8, elapsed_s=120.0, next_block_s=15.0)
    assert not _plan.past_max_time(alone, iterations=8, elapsed_s=120.0, next_block_s=15.0)
    # a fast step never sees it: two minutes give far more than 100 calls
    assert _plan.out_of_budget(config, series, iterations=5000, elapsed_s=120.0, next_block_s=0.02)


def test_the_plan_and_the_leak_gate_count_min_calls_as_budget():
    config = make_config(max_time="2m")
    rows = [{"iteration": i, "bytes": 1e8 + 1000 * i} for i in range(4)]
    plan = _plan.calibrate(config, rows, iterations=3, measure_cost_s=0.05, step_time_s=15.0, elapsed_s=45.0)
    # the schedule reaches past what two minutes give (5 more readings) toward 100 calls
    assert plan.schedule[-1] >= 100 - 3
    gate = _plan.leak_gate(config, iterations=8, elapsed_s=120.0, step_time_s=15.0)
    assert gate == int(_plan.LEAK_GATE_BUDGET_SHARE * 100)
    alone = make_config(max_time="2m", min_calls=None)
    assert (
        _plan.leak_gate(alone, iterations=8, elapsed_s=120.0, step_time_s=15.0) == _plan.BASE_MIN_ITERATIONS
    )


def test_the_note_says_how_far_the_loop_goes():
    config = make_config(max_time="2m")
    note = _plan.past_max_time_note(config, iterations=8, step_time_s=15.0)
    assert "after 8 calls" in note and "at most 100 calls" in note and "--min-calls" in note


def test_min_calls_is_validated():
    import pytest

    from trainguard.exceptions import ConfigError

    with pytest.raises(ConfigError, match=r"min_calls=0 must be at least 1, e.g. 50"):
        make_config(min_calls=0)
    with pytest.raises(ConfigError, match=r"min_calls='many' must be a whole number"):
        make_config(min_calls="many")


def _node_series(n: int, rss_per_call: float, live_per_call: float, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "iteration": i,
            "bytes": 1e8 + rss_per_call * i + rng.normal(0, 20e3),
            "live_bytes": 8e7 + live_per_call * i + rng.normal(0, 20e3),
        }
        for i in range(n)
    ]


def test_rss_growth_outside_live_memory_is_held_with_the_node_words():
    from trainguard.leaks._node import NODE_LIVE_WORDS

    series = _node_series(60, rss_per_call=40e3, live_per_call=0.0)
    memory = _plan.decide_series(series, "bytes", 0.01, 2048.0, True, True)
    assert memory.verdict is Verdict.LEAK
    held = _plan.retention_hold(
        series,
        memory,
        alpha=0.01,
        tolerance=2048.0,
        final=True,
        gates=(True, True, False),
        words=NODE_LIVE_WORDS,
    )
    assert held.verdict is Verdict.NO_LEAK
    assert "RSS less the free pages of V8's heap" in held.reason and "malloc" not in held.reason
    # a leak that live memory sees too stays a leak
    leaking = _node_series(60, rss_per_call=40e3, live_per_call=40e3)
    memory = _plan.decide_series(leaking, "bytes", 0.01, 2048.0, True, True)
    held = _plan.retention_hold(
        leaking,
        memory,
        alpha=0.01,
        tolerance=2048.0,
        final=True,
        gates=(True, True, False),
        words=NODE_LIVE_WORDS,
    )
    assert held.verdict is Verdict.LEAK


def test_the_node_gate_waits_longer_than_python():
    from trainguard.leaks._node import NODE_LEAK_GATE_ITERATIONS

    config = make_config(max_time="2m")
    python = _plan.leak_gate(config, iterations=10, elapsed_s=1.0, step_time_s=0.04)
    node = _plan.leak_gate(
        config, iterations=10, elapsed_s=1.0, step_time_s=0.04, gate_iterations=NODE_LEAK_GATE_ITERATIONS
    )
    assert (python, node) == (_plan.LEAK_GATE_ITERATIONS, NODE_LEAK_GATE_ITERATIONS)
    # a slow Node step still gets a verdict within the budget: the gate is lowered to 60 % of it
    slow = _plan.leak_gate(
        config, iterations=10, elapsed_s=1.0, step_time_s=0.5, gate_iterations=NODE_LEAK_GATE_ITERATIONS
    )
    assert slow < NODE_LEAK_GATE_ITERATIONS
