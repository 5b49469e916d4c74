"""Leak statistics on synthetic series whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.exceptions import ConfigError
from trainguard.leaks import stats as S
from trainguard.leaks.stats import Verdict

MB = 1024.0 * 1024.0


def noisy(n: int, slope: float, sd: float, seed: int, *, rho: float = 0.0, spikes: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(0, sd, n)
    if rho:
        ar = np.zeros(n)
        for t in range(1, n):
            ar[t] = rho * ar[t - 1] + rng.normal(0, sd * np.sqrt(1 - rho**2))
        e = (e + ar) / np.sqrt(2)
    if spikes:
        e += (rng.random(n) < spikes) * rng.uniform(2, 4, n) * sd
    return 500 * MB + slope * np.arange(n) + e


def sequential(y: np.ndarray, tolerance: float = 1024.0, alpha: float = 0.01) -> tuple[Verdict, int]:
    x = np.arange(y.size, dtype=float)
    looks = S.look_schedule(12, y.size)
    a = S.alpha_per_look(alpha, len(looks))
    for k in looks:
        d = S.decide(y[:k], x[:k], alpha=a, tolerance=tolerance, final=k == looks[-1])
        if d.verdict is not None:
            return d.verdict, k
    raise AssertionError("the final look always decides")


def test_theil_sen_is_exact_on_a_line_and_ignores_spikes():
    x = np.arange(40.0)
    y = 3.0 * x + 7
    assert S.theil_sen(y) == pytest.approx(3.0)
    spiky = y.copy()
    spiky[[5, 17, 31]] += 1000.0
    assert S.theil_sen(spiky) == pytest.approx(3.0, abs=0.2)
    # least squares follows the spikes
    assert abs(S.least_squares_slope(spiky) - 3.0) > 1.0


def test_theil_sen_uses_x():
    x = np.array([0, 10, 20, 30, 40, 50.0])
    assert S.theil_sen(2.0 * x, x) == pytest.approx(2.0)
    assert S.robust_slope(2.0 * x + np.array([0, 1, -1, 1, 0, -1.0]), x).slope == pytest.approx(2.0, abs=0.1)


def test_interval_covers_the_true_slope_about_95_percent():
    covered = 0
    runs = 300
    for seed in range(runs):
        est = S.robust_slope(noisy(40, 1 * MB, 10 * MB, seed))
        covered += est.ci_low <= 1 * MB <= est.ci_high
    # autocorrelation correction makes it conservative, never below nominal by more than noise
    assert covered / runs >= 0.92


def test_autocorrelated_noise_widens_the_interval():
    y = noisy(60, 0.0, 10 * MB, 3, rho=0.8)
    with_ac = S.robust_slope(y)
    without = S.robust_slope(y, autocorrelation=False)
    assert with_ac.variance_inflation > 1.5
    assert (with_ac.ci_high - with_ac.ci_low) > (without.ci_high - without.ci_low) * 1.2


def test_trend_test_separates_growth_from_noise():
    flat = [S.robust_slope(noisy(40, 0, 5 * MB, s)).p_increase for s in range(100)]
    grow = [S.robust_slope(noisy(40, 2 * MB, 5 * MB, s)).p_increase for s in range(100)]
    assert np.mean(np.array(flat) < 0.01) <= 0.03
    assert np.mean(np.array(grow) < 0.01) >= 0.97


def test_constant_series_has_zero_slope_and_no_trend():
    est = S.robust_slope([100.0] * 20)
    assert est.slope == 0 and est.p_increase == 0.5


def test_short_series_gives_an_infinite_interval():
    est = S.robust_slope([1.0, 2.0])
    assert est.n == 2 and est.ci_low == -np.inf and est.ci_high == np.inf


def test_warmup_is_where_the_series_settles():
    rng = np.random.default_rng(0)
    ramp = np.concatenate([np.linspace(0, 100, 15), np.full(45, 100.0)]) + rng.normal(0, 1, 60)
    cut = S.detect_warmup(ramp)
    assert 12 <= cut <= 18
    # a steady trend is settled from the start (or after the first reading at most)
    assert S.detect_warmup(np.arange(60.0) * 5 + rng.normal(0, 1, 60)) <= 2
    # pure noise: no warm-up in most series
    cuts = [S.detect_warmup(np.random.default_rng(s).normal(0, 1, 50)) for s in range(50)]
    assert np.mean(np.array(cuts) == 0) >= 0.8


def test_steps_are_found():
    rng = np.random.default_rng(1)
    y = rng.normal(0, 1, 50)
    y[30:] += 40
    assert S.detect_steps(y) == (30,)
    assert S.detect_steps(rng.normal(0, 1, 50)) == ()


def test_plateau_test():
    rng = np.random.default_rng(2)
    t = np.arange(120.0)
    grows_then_stops = 300 * (1 - np.exp(-t / 10)) + rng.normal(0, 3, 120)
    result = S.plateau_test(grows_then_stops)
    assert result.is_plateau and result.growth_before > 200
    linear = 2 * t + rng.normal(0, 3, 120)
    assert not S.plateau_test(linear).is_plateau


def test_decide_leak_no_leak_plateau_inconclusive():
    x = np.arange(60.0)
    leak = S.decide(noisy(60, 1 * MB, 2 * MB, 0), x, alpha=0.001, tolerance=1024)
    assert leak.verdict is Verdict.LEAK and "grows" in leak.reason
    assert leak.slope.slope == pytest.approx(1 * MB, rel=0.25)
    flat = S.decide(
        500 * MB + np.random.default_rng(0).integers(0, 3, 60) * 4096.0, x, alpha=0.001, tolerance=64 * 1024
    )
    assert flat.verdict is Verdict.NO_LEAK
    t = np.arange(150.0)
    plateau = 500 * MB + 200 * MB * (1 - np.exp(-t / 12)) + np.random.default_rng(0).normal(0, 1 * MB, 150)
    d = S.decide(plateau, t, alpha=0.001, tolerance=1024, final=True)
    assert d.verdict is Verdict.PLATEAU and "leveled off" in d.reason
    noisy_flat = noisy(20, 0, 30 * MB, 4)
    assert S.decide(noisy_flat, alpha=0.001, tolerance=1024, final=False).verdict is None
    assert S.decide(noisy_flat, alpha=0.001, tolerance=1024, final=True).verdict is Verdict.INCONCLUSIVE


def test_one_jump_is_not_a_leak():
    rng = np.random.default_rng(5)
    y = 500 * MB + rng.normal(0, 0.2 * MB, 40)
    y[25:] += 60 * MB
    d = S.decide(y, alpha=0.001, tolerance=1024, final=False)
    # 15 readings after the jump: too few to rule out a leak, so the check asks for more
    assert d.verdict is None and "not ruled out" in d.reason
    assert 25 in d.step_indices
    # given them, it calls the jump what it is: growth that stopped
    y = 500 * MB + rng.normal(0, 0.2 * MB, 120)
    y[25:] += 60 * MB
    d = S.decide(y, alpha=0.001, tolerance=1024, final=True)
    assert d.verdict is Verdict.PLATEAU and "leveled off" in d.reason, d.reason


def test_staircase_is_a_leak():
    y = 500 * MB + (np.arange(60) // 5) * 8 * MB + np.random.default_rng(6).normal(0, 0.1 * MB, 60)
    assert S.decide(y, alpha=0.001, tolerance=1024).verdict is Verdict.LEAK


def test_sequential_false_positive_rate_on_noise():
    calls = [sequential(noisy(150, 0.0, 20 * MB, s, spikes=0.03))[0] for s in range(150)]
    assert np.mean([v is Verdict.LEAK for v in calls]) <= 0.03


def test_sequential_detects_a_clear_leak_early():
    results = [sequential(noisy(150, 1 * MB, 3 * MB, s)) for s in range(50)]
    assert all(v is Verdict.LEAK for v, _ in results)
    assert np.median([k for _, k in results]) <= 30


def test_growth_that_levels_off_is_not_a_leak_once_the_level_is_reached():
    # 60 MB of growth that levels off at iteration 50 (allocator pools, kernel caches); the
    # sequential test cuts at most half the series as warm-up, so it is asked from iteration 100 on
    t = np.arange(200.0)
    calls = []
    for s in range(30):
        ramp = 1 - (1 - np.minimum(t, 50) / 50) ** 2  # slows down, and stops at iteration 50
        y = 500 * MB + 60 * MB * ramp + np.random.default_rng(s).normal(0, 0.5 * MB, 200)
        looks = S.look_schedule(100, 200)
        a = S.alpha_per_look(0.01, len(looks))
        for k in looks:
            d = S.decide(y[:k], t[:k], alpha=a, tolerance=1024, final=k == looks[-1])
            if d.verdict is not None:
                calls.append(d.verdict)
                break
    assert sum(v is Verdict.LEAK for v in calls) <= 1
    assert sum(v is Verdict.PLATEAU for v in calls) >= 25


@pytest.mark.parametrize(
    "call",
    [
        lambda: S.robust_slope([1, 2, 3], confidence=1.5),
        lambda: S.robust_slope([1, 2, 3], [1, 2]),
        lambda: S.robust_slope([1, float("nan"), 3]),
        lambda: S.look_schedule(2, 10),
        lambda: S.look_schedule(10, 5),
        lambda: S.look_schedule(10, 50, ratio=1.0),
        lambda: S.alpha_per_look(0.0, 3),
        lambda: S.alpha_per_look(0.01, 0),
        lambda: S.decide([1, 2, 3, 4], alpha=2.0, tolerance=0),
        lambda: S.decide([1, 2, 3, 4], alpha=0.01, tolerance=-1),
        lambda: S.detect_warmup([1, 2, 3], max_fraction=1.5),
    ],
)
def test_bad_input_is_a_config_error(call):
    with pytest.raises(ConfigError):
        call()


def test_look_schedule_and_alpha():
    looks = S.look_schedule(12, 200)
    assert looks[0] == 12 and looks[-1] == 200 and list(looks) == sorted(set(looks))
    assert S.alpha_per_look(0.01, 10) == pytest.approx(0.0005)


def test_strong_test_refuses_a_ramp_that_stops_but_keeps_a_steady_leak():
    # 0.5 MB per call for 42 calls, then flat: seen at call 50 the whole window grows, but the
    # most recent readings do not; the strict test (used when a slow step's budget ends before the
    # warm-up could be waited out) must not call it a leak, and must still call a steady one
    t = np.arange(51.0)
    refused = 0
    for s in range(20):
        noise = np.random.default_rng(s).normal(0, 0.3 * MB, t.size)
        ramp = 500 * MB + 0.5 * MB * np.minimum(t, 42) + noise
        steady = 500 * MB + 0.5 * MB * t + noise
        refused += S.decide(ramp, t, alpha=0.001, tolerance=1024, strong=True).verdict is not Verdict.LEAK
        assert S.decide(steady, t, alpha=0.001, tolerance=1024, strong=True).verdict is Verdict.LEAK
    assert refused >= 17
    # the plain test calls most of those ramps a leak: the strict one is what makes the difference
    plain = sum(
        S.decide(
            500 * MB + 0.5 * MB * np.minimum(t, 42) + np.random.default_rng(s).normal(0, 0.3 * MB, t.size),
            t,
            alpha=0.001,
            tolerance=1024,
        ).verdict
        is Verdict.LEAK
        for s in range(20)
    )
    assert plain >= 8


def test_slow_but_significant_growth_below_tolerance_says_so() -> None:
    # 2 KiB/iter, steady and nearly noiseless, against a 5 KiB/iter tolerance: not a leak, but the
    # reason must not claim there is no growth
    rng = np.random.default_rng(3)
    y = 400e6 + 2048.0 * np.arange(150) + rng.normal(0, 200.0, 150)
    d = S.decide(y, alpha=0.001, tolerance=5 * 1024.0, final=True)
    assert d.verdict is Verdict.NO_LEAK, d.reason
    assert d.reason.startswith("slow growth") and "--tolerance" in d.reason


def test_trend_test_holds_its_level_on_short_autocorrelated_series():
    # half white noise, half AR(1) with phi = 0.5, and spikes: the lag-1 rule with n - 2 degrees
    # of freedom called 1.6 % of these flat series growing at the 1 % level (1.85 % at n = 10);
    # the long-run variance with its own degrees of freedom holds the level (0.7 %)
    p = np.array(
        [
            S.robust_slope(noisy(n, 0.0, 10 * MB, seed, rho=0.5, spikes=0.03)).p_increase
            for n in (10, 30)
            for seed in range(4000)
        ]
    )
    assert np.mean(p < 0.01) <= 0.012


def test_long_run_estimate_sets_the_degrees_of_freedom():
    y = noisy(136, 0.0, 10 * MB, 5, rho=0.5)
    est = S.robust_slope(y)
    lags = int(np.ceil(136 ** (1 / 3)))
    assert est.df == pytest.approx(1.5 * 136 / (lags + 1))
    assert est.df < 136 - 2
    # the interval, the test and the standard error read back agree on those degrees of freedom
    from scipy import stats as sps

    assert est.stderr * sps.t.ppf(0.975, est.df) == pytest.approx((est.ci_high - est.ci_low) / 2)
    assert est.p_increase == pytest.approx(sps.t.sf(est.z, est.df))
    plain = S.robust_slope(y, autocorrelation=False)
    assert plain.df == 136 - 2 and plain.variance_inflation == 1.0


def test_long_run_factor_sees_correlation_past_lag_one():
    # noise whose lag-1 correlation is small but whose correlations persist (a slow AR(1) at 0.9
    # under much white noise): its long-run variance (4.6 times its variance) is far above what
    # lag 1 alone implies (1.4)
    factors = []
    for seed in range(50):
        rng = np.random.default_rng(seed)
        ar = np.zeros(200)
        for t in range(1, 200):
            ar[t] = 0.9 * ar[t - 1] + rng.normal(0, np.sqrt(1 - 0.81))
        y = rng.normal(0, 2.0, 200) + ar
        est = S.robust_slope(y)
        rho = est.autocorrelation
        factors.append(est.variance_inflation / ((1 + rho) / (1 - rho)))
    # exactly 1.0 when only lag 1 is read
    assert np.mean(np.array(factors) > 1.0) >= 0.5 and np.percentile(factors, 90) > 1.1


def test_long_run_off_keeps_the_lag_one_rule():
    # the leak check's confirmation of count evidence reads memory this way (_plan.look)
    y = noisy(15, 0.0, 10 * MB, 7, rho=0.5)
    plain = S.robust_slope(y, long_run=False)
    assert plain.df == 15 - 2
    rho = plain.autocorrelation
    assert plain.variance_inflation == pytest.approx((1 + rho) / (1 - rho))
    assert S.robust_slope(y).df < 15 - 2
    assert S.decide(y, alpha=0.01, tolerance=1.0, long_run=False).slope.df == 15 - 2
