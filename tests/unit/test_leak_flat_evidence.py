"""``no_leak`` from exact evidence for slow steps: counts exactly flat, bytes in use flat, and RSS
not growing past the tolerance (``stats.flat_since``, ``_evidence.flat_counts``,
``stats.rss_allows_flat``, ``_plan.flat_decision`` through the loop's own looks)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainguard.exceptions import ConfigError
from trainguard.leaks import _evidence, _native, _plan, stats
from trainguard.leaks._run import make_config

MB = 1024.0 * 1024.0


def test_flat_since_is_where_a_count_stopped_rising_for_good() -> None:
    assert stats.flat_since([40, 1124, 1124, 1124, 1124]) == 1  # a first fit's graph, then 0 a fit
    assert stats.flat_since([1, 2, 3, 4]) == 3  # a leak: higher at every census
    assert stats.flat_since([7, 7, 6, 7, 5]) == 0  # falls within the run, never above where it began
    assert stats.flat_since([5, 5, 5, 6]) == 3  # one more object at the last census ends the run
    assert stats.flat_since([3]) == 0


def test_flat_since_bad_input() -> None:
    with pytest.raises(ConfigError, match="at least one count"):
        stats.flat_since([])
    with pytest.raises(ConfigError, match="NaN"):
        stats.flat_since([1.0, float("nan")])


def _point(i: int, **kinds: int) -> _evidence.CountPoint:
    return _evidence.CountPoint(i, {k.replace("_", "."): (n, 0) for k, n in kinds.items()}, {})


def test_flat_counts_is_the_latest_flat_run_of_every_kind() -> None:
    warm_then_flat = [_point(0, tensorflow_Operation=0)] + [
        _point(i, tensorflow_Operation=1124, keras_Layer=4) for i in (1, 2, 3, 4, 7, 10, 13, 16)
    ]
    flat = _evidence.flat_counts(warm_then_flat)
    assert (flat.from_iteration, flat.censuses, flat.calls, flat.kinds) == (1, 8, 15, 2)
    # one kind that keeps rising (an entry a call into a dict): the run is its last census only
    leaking = [_point(i, tensorflow_Operation=1124, entries_of_dict_m_cache=i) for i in range(1, 17)]
    assert _evidence.flat_counts(leaking).censuses == 1
    # a kind first seen at call 9 (a container that grew) starts the run there
    late = [_point(i, keras_Layer=4, **({"entries_of_list_m_x": 3} if i >= 9 else {})) for i in range(1, 17)]
    assert _evidence.flat_counts(late).from_iteration == 9
    assert _evidence.flat_counts([]).censuses == 0


def _looks(rss, in_use, *, step_time_s: float, flat: bool = True, flat_from: int = 1):
    """The loop's looks over a slow step in the default 2-minute budget, one reading a call, with
    a census at each of the first 4 calls and then every 3rd (what a Keras-TF census of 0.15 s
    affords on a step of seconds), every counted kind flat from call ``flat_from`` on. Returns the
    decision that stopped the loop, its call, and that look."""
    config = make_config(max_time="2m")
    series: list[dict] = []
    plan = None
    for i, y in enumerate(rss):
        row = {"iteration": i, "bytes": float(y)}
        if in_use is not None:
            row[_native.KEY] = int(in_use[i])
        series.append(row)
        elapsed = (i + 1) * step_time_s
        if plan is None and len(series) >= 3:
            plan = _plan.calibrate(
                config, series, iterations=i, measure_cost_s=0.01, step_time_s=step_time_s, elapsed_s=elapsed
            )
        final = _plan.out_of_budget(config, series, iterations=i, elapsed_s=elapsed, next_block_s=step_time_s)
        if plan is None or not (final or len(series) in plan.schedule):
            continue
        taken = [c for c in range(flat_from, i + 1) if c <= 4 or c % 3 == 0]
        support = None
        if flat and taken:
            support = _evidence.FlatCounts(taken[0], len(taken), taken[-1] - taken[0], 40)
        res = _plan.look(
            config,
            plan,
            series,
            iterations=i,
            elapsed_s=elapsed,
            step_time_s=step_time_s,
            final=final,
            key="bytes",
            flat_support=support,
        )
        if res.stop:
            return res.decision, i, res
    raise AssertionError("the final look always stops")
