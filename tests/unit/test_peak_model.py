"""The peak model: a pure fit of a trial's peak memory on its numeric params."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.runner.policy._peak_fit import PeakFit, fit_peaks
from trainguard.runner.policy._peaks import PeakPrediction, numeric_params

MiB = 2**20


def _sweep(seed: int, true, noise: float = 0.03, extra=None):
    rng = np.random.default_rng(seed)
    grid = [
        {"batch": b, "width": w, "seed": int(rng.integers(10_000)), "optimizer": "adam", **(extra or {})}
        for b in (16, 32, 64, 128, 256)
        for w in (64, 128, 256, 512, 1024)
    ]
    rng.shuffle(grid)
    return [(p, int(true(p) * (1 + rng.normal(0, noise)))) for p in grid]


def _floor_plus_product(p):
    return 400 * MiB + 3000 * p["batch"] * p["width"]


@pytest.mark.parametrize("seed", range(6))
def test_floor_plus_product_is_learned_within_20_percent_after_ten_trials(seed: int) -> None:
    obs = _sweep(seed, _floor_plus_product)
    fit = fit_peaks(obs[:10])
    assert isinstance(fit, PeakFit), fit
    assert set(fit.features) == {"batch", "width"}
    assert fit.ignored["seed"] == "does not explain the peaks"
    assert fit.ignored["optimizer"] == "not a number"
    errors = [
        abs(fit.predict(p).peak_bytes - _floor_plus_product(p)) / _floor_plus_product(p) for p, _ in obs[10:]
    ]
    assert np.median(errors) < 0.20
    # the interval holds the truth for most trials not yet seen
    inside = [
        fit.predict(p).low_bytes <= _floor_plus_product(p) <= fit.predict(p).high_bytes for p, _ in obs[10:]
    ]
    assert sum(inside) >= 0.8 * len(inside)


def test_extrapolation_to_a_larger_config_keeps_the_truth_in_its_interval() -> None:
    fit = fit_peaks(_sweep(3, _floor_plus_product)[:25])
    assert isinstance(fit, PeakFit)
    big = {"batch": 512, "width": 2048}
    pred = fit.predict(big)
    assert pred.low_bytes <= _floor_plus_product(big) <= pred.high_bytes
    assert pred.low_bytes > 2 * 400 * MiB  # far from "anything goes"


def test_pure_power_law_without_floor() -> None:
    fit = fit_peaks(_sweep(1, lambda p: 50 * p["batch"] ** 0.5 * p["width"] ** 1.5 * 1000)[:12])
    assert isinstance(fit, PeakFit)
    exps = fit.to_dict()["exponents"]
    assert exps["batch"] == pytest.approx(0.5, abs=0.15) and exps["width"] == pytest.approx(1.5, abs=0.15)


def test_too_few_trials_is_unknown_and_says_why() -> None:
    got = fit_peaks(_sweep(0, _floor_plus_product)[:3])
    assert isinstance(got, PeakPrediction) and not got.known
    assert "3 finished trials; the model needs 5" in got.reason


def test_peaks_the_params_do_not_explain_are_unknown() -> None:
    rng = np.random.default_rng(7)
    obs = [
        ({"batch": int(b), "seed": int(s)}, int(rng.uniform(300, 900) * MiB))
        for b, s in zip(rng.integers(8, 512, 30), rng.integers(0, 10**6, 30), strict=True)
    ]
    got = fit_peaks(obs)
    assert isinstance(got, PeakPrediction) and not got.known
    assert "do not explain" in got.reason


def test_flat_peaks_predict_their_level_whatever_the_params() -> None:
    rng = np.random.default_rng(2)
    obs = [
        ({"lr": float(lr), "seed": int(s)}, int(500 * MiB * (1 + rng.normal(0, 0.01))))
        for lr, s in zip(rng.uniform(1e-4, 1e-1, 12), rng.integers(0, 999, 12), strict=True)
    ]
    fit = fit_peaks(obs)
    assert isinstance(fit, PeakFit) and fit.flat
    pred = fit.predict({"lr": 5.0, "seed": 1})
    assert pred.low_bytes < 500 * MiB < pred.high_bytes


def test_non_numeric_and_nested_params() -> None:
    values, ignored = numeric_params(
        {"model": {"width": 64, "act": "relu"}, "flag": True, "lr": float("nan")}
    )
    assert values == {"model.width": 64.0}
    assert ignored == {"model.act": "not a number", "flag": "not a number", "lr": "not finite"}


def test_prediction_for_params_lacking_a_feature_is_unknown() -> None:
    fit = fit_peaks(_sweep(0, _floor_plus_product)[:15])
    assert isinstance(fit, PeakFit)
    got = fit.predict({"batch": 64})
    assert not got.known and "width" in got.reason


def test_an_outlier_trial_does_not_drag_the_fit() -> None:
    obs = _sweep(4, _floor_plus_product)[:20]
    params, peak = obs[0]
    obs[0] = (params, peak * 3)  # a trial that shared its worker with something else
    fit = fit_peaks(obs)
    assert isinstance(fit, PeakFit)
    errors = [
        abs(fit.predict(p).peak_bytes - _floor_plus_product(p)) / _floor_plus_product(p) for p, _ in obs[1:]
    ]
    assert np.median(errors) < 0.05


# -- decisions on a prediction -----------------------------------------------------------------

from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner.policy import Policy, Shrink  # noqa: E402
from trainguard.runner.policy._peaks import fits, over_limit, pick_for_budget, shrunk_to_fit  # noqa: E402


def _p(peak: int, low: int, high: int) -> PeakPrediction:
    return PeakPrediction(peak, low, high, "test", 10)


def test_a_trial_is_skipped_only_when_its_whole_interval_is_over_the_limit() -> None:
    assert over_limit(_p(900, 700, 1100), 600)
    assert not over_limit(_p(900, 500, 1100), 600)  # it may fit: it runs
    assert not over_limit(PeakPrediction.unknown("few"), 600)
    assert not over_limit(_p(900, 700, 1100), None)


def test_budget_packing_takes_the_largest_that_fits() -> None:
    preds = [_p(100, 90, 110), _p(500, 450, 550), _p(300, 280, 320), PeakPrediction.unknown("x")]
    assert pick_for_budget(preds, 600) == 1
    assert pick_for_budget(preds, 400) == 2
    assert pick_for_budget(preds, 50) == 3  # none fits: one the model cannot size goes first
    assert pick_for_budget(preds[:3], 50) == 0  # else the smallest, which then waits for room
    assert pick_for_budget([PeakPrediction.unknown("x")] * 3, 10) == 0


def test_shrunk_to_fit_walks_the_rules_steps_to_the_largest_size_predicted_to_fit() -> None:
    def predict(params):
        size = params["batch_size"] * 10
        return _p(size, int(size * 0.9), int(size * 1.1))

    rule = Shrink("batch_size", factor=0.5, minimum=1)
    params, pred = shrunk_to_fit(rule, {"batch_size": 256, "lr": 0.1}, predict, 1000, 0.05)
    assert params == {"batch_size": 64, "lr": 0.1} and fits(pred, 1000, 0.05)
    assert shrunk_to_fit(rule, {"batch_size": 32}, predict, 1000, 0.05) is None  # it fits already


def test_predict_peaks_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="predict_peaks must be True or False"):
        Policy(predict_peaks="yes")


def test_a_pick_uses_the_last_fit_and_the_refit_comes_after() -> None:
    """The dispatch path never waits for a fit: ``predict(refit=False)`` answers with the model
    fitted before the newest observation; :meth:`model` (the loop, once workers have their
    trials) takes the observation in."""
    from trainguard.runner.session._predict import PeakForecaster

    obs = _sweep(0, _floor_plus_product)
    forecaster = PeakForecaster()
    for params, peak in obs[:8]:
        forecaster.observe(params, peak)
    first = forecaster.model()
    assert isinstance(first, PeakFit) and first.trials == 8
    version = forecaster.version
    forecaster.observe(*obs[8])
    probe = obs[20][0]
    assert forecaster.current() is first
    assert forecaster.predict(probe, key=1, refit=False) == first.predict(probe)
    assert forecaster.version == version  # nothing was fitted on the way
    refitted = forecaster.model()
    assert refitted.trials == 9 and forecaster.version == version + 1
    assert forecaster.predict(probe, key=1, refit=False) == refitted.predict(probe)  # the cache followed


def test_the_t_quantile_is_computed_once_per_level_and_df() -> None:
    from trainguard.runner.policy._tdist import t_quantile

    t_quantile.cache_clear()
    fit = fit_peaks(_sweep(1, _floor_plus_product)[:12])
    assert isinstance(fit, PeakFit)
    before = t_quantile.cache_info()
    for params, _ in _sweep(2, _floor_plus_product)[:10]:
        fit.predict(params)
    after = t_quantile.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 9
