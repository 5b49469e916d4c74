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


def _looks(rss, in_use, *, step_time_s: float, flat: bool = True, flat_from: int = 1, heaps=None):
    """The loop's looks over a slow step in the default 2-minute budget, one reading a call, with
    a census at each of the first 4 calls and then every 3rd (what a Keras-TF census of 0.15 s
    affords on a step of seconds), every counted kind flat from call ``flat_from`` on; ``heaps``:
    glibc's heaps as resident at each reading (the rows then carry RSS outside them and live
    memory, as the loop's do). Returns the decision that stopped the loop, its call, and that look.
    The budget is max_time alone (min_calls=None): the series given is what two minutes give."""
    config = make_config(max_time="2m", min_calls=None)
    series: list[dict] = []
    plan = None
    for i, y in enumerate(rss):
        row = {"iteration": i, "bytes": float(y)}
        if in_use is not None:
            row[_native.KEY] = int(in_use[i])
        if heaps is not None:
            row[_native.HEAP_KEY] = int(heaps[i])
            row[_native.OUTSIDE_KEY] = int(y - heaps[i])
            if in_use is not None:
                row[_native.LIVE_KEY] = int(y - heaps[i] + in_use[i])
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


def _rss(seed: int, n: int, sd: float, per_call: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 700 * MB + per_call * np.arange(n) + rng.normal(0, sd, n)


def _flat_in_use(seed: int, n: int) -> np.ndarray:
    return 300_000_000 + np.random.default_rng(seed + 1000).integers(-2000, 2000, n)


#: RSS noise of the seed's Keras fit on TensorFlow after cleanup() and malloc_trim(0), one standard
#: deviation: 0.25-0.37 MB (the noise scale of 40 and 106 readings, CHANGELOG.md's history of figures)
TF_FIT_RSS_SD = 0.3 * MB


def test_slow_flat_step_is_no_leak_within_about_20_calls_on_exact_evidence() -> None:
    n = 120  # a 1 s step: 120 calls in the 2-minute budget, a tolerance of 17 KiB a call
    for seed in range(5):
        rss, in_use = _rss(seed, n, TF_FIT_RSS_SD), _flat_in_use(seed, n)
        decision, calls, _ = _looks(rss, in_use, step_time_s=1.0)
        assert decision.verdict is stats.Verdict.NO_LEAK and calls <= 35, (decision.reason, calls)
        assert "exact evidence" in decision.reason and "exactly flat" in decision.reason
        # RSS alone decides the same series only later
        alone, alone_calls, _ = _looks(rss, in_use, step_time_s=1.0, flat=False)
        assert alone_calls > calls, (alone.reason, alone_calls, calls)


def test_rss_growth_beside_flat_counts_and_bytes_in_use_is_never_no_leak() -> None:
    # memory outside malloc and Python objects (an mmap kept a call) shows in RSS alone: 8 times the
    # tolerance (43 KiB a call for a 2.5 s step) under the TF fit's RSS noise
    n = 48
    tolerance = _plan.auto_tolerance(2.5)
    for seed in range(30):
        rss = _rss(seed, n, TF_FIT_RSS_SD, per_call=8 * tolerance)
        decision, calls, _ = _looks(rss, _flat_in_use(seed, n), step_time_s=2.5)
        assert decision.verdict is not stats.Verdict.NO_LEAK, (seed, calls, decision.reason)


def test_rss_too_noisy_to_rule_out_growth_waits_as_before() -> None:
    # the torch-backend Keras fit's +-70 MB swing over a 5 s step: 20 readings cannot rule out RSS
    # growth of 4 tolerances, so exact evidence does not decide; the check is what it was
    n = 24
    for seed in range(5):
        rss, in_use = _rss(seed, n, 35 * MB), _flat_in_use(seed, n)
        with_flat, calls, _ = _looks(rss, in_use, step_time_s=5.0)
        alone, alone_calls, _ = _looks(rss, in_use, step_time_s=5.0, flat=False)
        assert "exact evidence" not in with_flat.reason
        assert (with_flat.verdict, calls) == (alone.verdict, alone_calls)


def test_rising_bytes_in_use_or_none_at_all_never_give_no_leak_on_exact_evidence() -> None:
    n = 48
    rss = _rss(3, n, TF_FIT_RSS_SD)
    native_leak = 300_000_000 + 65536 * np.arange(n)  # 64 KiB a call through malloc
    decision, _, _ = _looks(rss, native_leak, step_time_s=2.5)
    assert "exact evidence" not in decision.reason
    # no allocator evidence (musl, macOS, --no-allocator-evidence): the check as it was
    unavailable, calls, _ = _looks(rss, None, step_time_s=2.5)
    alone, alone_calls, _ = _looks(rss, None, step_time_s=2.5, flat=False)
    assert "exact evidence" not in unavailable.reason and (unavailable.verdict, calls) == (
        alone.verdict,
        alone_calls,
    )


def _heap_creep(seed: int, n: int) -> np.ndarray:
    """glibc's heaps as resident after malloc_trim(0) on the seed's Keras fit: pages the trim gave
    back touched again and pinned, about 65 KiB a call early and slowing toward the untrimmed
    level 12 MiB up (CHANGELOG.md's history of figures), under the fit's RSS noise (0.3 MB)."""
    rng = np.random.default_rng(seed + 2000)
    return 400 * MB + 12 * MB * (1 - np.exp(-np.arange(n) / 190.0)) + rng.normal(0, TF_FIT_RSS_SD, n)


def _outside(seed: int, n: int, per_call: float = 0.0) -> np.ndarray:
    """RSS outside the heaps: pymalloc's arenas, libraries, mappings (11 KiB of noise measured)."""
    rng = np.random.default_rng(seed + 3000)
    return 300 * MB + per_call * np.arange(n) + rng.normal(0, 11 * 1024, n)


def test_rss_creeping_inside_glibc_heaps_is_no_leak_on_live_memory() -> None:
    # the seed's Keras fit with cleanup(): RSS grows and swings inside the heaps while bytes in
    # use grow 4 KiB a call (TensorFlow's per-fit metrics cells) and RSS outside them is flat
    n = 120
    tolerance = _plan.auto_tolerance(1.0)
    for seed in range(5):
        heaps = _heap_creep(seed, n)
        rss = heaps + _outside(seed, n)
        in_use = 300_000_000 + 4096 * np.arange(n) + np.random.default_rng(seed).integers(-500, 500, n)
        decision, calls, _ = _looks(rss, in_use, step_time_s=1.0, heaps=heaps)
        assert decision.verdict is stats.Verdict.NO_LEAK and calls <= 60, (decision.reason, calls)
        assert "inside malloc's heaps" in decision.reason and "live memory" in decision.reason
        assert decision.slope is not None and decision.slope.slope > tolerance  # RSS as a whole grew
        # the same rows without the heaps read: RSS whole, which grows past the tolerance
        whole, _, _ = _looks(rss, in_use, step_time_s=1.0)
        assert whole.verdict is not stats.Verdict.NO_LEAK, whole.reason


def test_growth_outside_the_heaps_or_in_bytes_in_use_is_never_no_leak_on_live_memory() -> None:
    n = 120
    tolerance = _plan.auto_tolerance(1.0)
    for seed in range(10):
        heaps = _heap_creep(seed, n)
        # an mmap kept a call (outside the heaps), 2 tolerances a call
        rss = heaps + _outside(seed, n, per_call=2 * tolerance)
        decision, calls, _ = _looks(rss, _flat_in_use(seed, n), step_time_s=1.0, heaps=heaps)
        assert decision.verdict is not stats.Verdict.NO_LEAK, (seed, calls, decision.reason)
        # malloc'd memory kept a call, 2 tolerances: bytes in use rise (and live memory with them)
        kept = 300_000_000 + 2 * tolerance * np.arange(n)
        decision, calls, _ = _looks(heaps + _outside(seed, n), kept, step_time_s=1.0, heaps=heaps)
        assert decision.verdict is not stats.Verdict.NO_LEAK, (seed, calls, decision.reason)


def test_counts_must_stay_flat_for_15_calls() -> None:
    n = 48
    rss, in_use = _rss(4, n, TF_FIT_RSS_SD), _flat_in_use(4, n)
    decision, calls, _ = _looks(rss, in_use, step_time_s=2.5, flat_from=12)  # a kind rose until call 12
    assert decision.verdict is not stats.Verdict.NO_LEAK or calls >= 12 + _plan.FLAT_MIN_CALLS


def test_rss_rule_needs_the_point_slope_under_the_tolerance_and_the_interval_under_the_cap() -> None:
    tol = 40_000.0

    def est(slope: float, half: float, p: float = 0.5) -> stats.SlopeEstimate:
        return stats.SlopeEstimate(slope, slope - half, slope + half, 20, 1.0, p, 0.95)

    assert stats.rss_allows_flat(est(10_000, 70_000), alpha=1e-3, tolerance=tol)
    assert not stats.rss_allows_flat(est(45_000, 50_000), alpha=1e-3, tolerance=tol)  # slope over it
    assert not stats.rss_allows_flat(
        est(0, 2.5 * tol), alpha=1e-3, tolerance=tol
    )  # too noisy to see 2 tolerances
    assert not stats.rss_allows_flat(
        est(-3 * tol, 2.5 * tol), alpha=1e-3, tolerance=tol
    )  # a lucky dip, as noisy
    assert not stats.rss_allows_flat(est(30_000, 20_000, p=1e-4), alpha=1e-3, tolerance=tol)  # significant


def test_an_inconclusive_says_what_max_time_the_exact_evidence_would_need() -> None:
    d = stats.decide(_rss(5, 12, TF_FIT_RSS_SD), np.arange(12), alpha=1e-3, tolerance=40_000, final=True)
    assert d.verdict is stats.Verdict.INCONCLUSIVE
    args = dict(iterations=12, readings=12, step_times=[5.0] * 12, elapsed_s=60.0, tolerance=40_000)
    verdict, reason = _plan.final_verdict(d, None, None, flat_readings=19.0, **args)
    assert verdict is stats.Verdict.INCONCLUSIVE
    assert (
        "would give 19 readings (counts exactly flat" in reason
        and "exact evidence would decide no_leak" in reason
    )
    _, plain = _plan.final_verdict(d, None, None, **args)
    assert "exact evidence" not in plain and "--max-time" in plain


def test_readings_the_exact_evidence_needs() -> None:
    n = 12
    series = [
        {"iteration": i, "bytes": float(y), _native.KEY: int(a)}
        for i, (y, a) in enumerate(zip(_rss(6, n, TF_FIT_RSS_SD), _flat_in_use(6, n), strict=True))
    ]
    tol = _plan.auto_tolerance(5.0)
    memory = _plan.decide_series(series, "bytes", 1e-3, tol, True, True)
    short = _evidence.FlatCounts(1, 4, 10, 40)  # flat over 10 calls: 5 more calls, one reading each
    need = _plan.flat_readings_needed(series, memory, short, alpha=1e-3, tolerance=tol, k=1)
    assert need == pytest.approx(n + 5)
    assert math.isinf(_plan.flat_readings_needed(series, memory, None, alpha=1e-3, tolerance=tol, k=1))
    rising = _evidence.FlatCounts(11, 1, 0, 40)  # the last census rose: the counts disagree
    assert math.isinf(_plan.flat_readings_needed(series, memory, rising, alpha=1e-3, tolerance=tol, k=1))


def test_rss_growth_inside_glibc_heaps_is_never_a_leak_by_itself() -> None:
    # RSS grows 4 tolerances a call, steadily, all of it inside the heaps (fragmentation that keeps
    # growing), with no counts at all: live memory is flat, so no look says leak
    n = 120
    tolerance = _plan.auto_tolerance(1.0)
    for seed in range(5):
        rng = np.random.default_rng(seed + 4000)
        heaps = 400 * MB + 4 * tolerance * np.arange(n) + rng.normal(0, TF_FIT_RSS_SD, n)
        rss = heaps + _outside(seed, n)
        decision, calls, _ = _looks(rss, _flat_in_use(seed, n), step_time_s=1.0, flat=False, heaps=heaps)
        assert decision.verdict is not stats.Verdict.LEAK, (seed, calls, decision.reason)
        assert "inside malloc's heaps" in decision.reason, decision.reason
        # RSS whole, as before the heaps were read: a leak
        whole, _, _ = _looks(rss, _flat_in_use(seed, n), step_time_s=1.0, flat=False)
        assert whole.verdict is stats.Verdict.LEAK, whole.reason
        # the same RSS growth outside the heaps (an mmap kept a call) is a leak, heaps read or not
        outside_leak = 400 * MB + rng.normal(0, TF_FIT_RSS_SD, n)
        rss2 = outside_leak + _outside(seed, n, per_call=4 * tolerance)
        leak, _, _ = _looks(rss2, _flat_in_use(seed, n), step_time_s=1.0, flat=False, heaps=outside_leak)
        assert leak.verdict is stats.Verdict.LEAK, leak.reason
