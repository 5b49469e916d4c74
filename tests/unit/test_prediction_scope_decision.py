"""Which runs' history a run's peak model reads: the pure decision, its one-line refusals, and the
words that say which runs a fit (and so a skip) rests on."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.runner.policy._prediction_scope import PredictionScope, prediction_scope, sources_words
from trainguard.runner.session._predict import PeakForecaster

MiB = 2**20


def test_by_default_a_run_reads_its_own_history_only() -> None:
    scope = prediction_scope("B", None, predict_peaks=True, store="runs.db", stored_runs=["A", "B"])
    assert scope == PredictionScope("B", None, True)
    assert scope.runs == ("B",)


def test_predict_from_adds_the_named_run_after_the_runs_own() -> None:
    scope = prediction_scope("B", "A", predict_peaks=True, store="runs.db", stored_runs=["A"])
    assert scope.runs == ("B", "A")
    # naming itself is its own history, read once
    assert prediction_scope("A", "A", predict_peaks=True, store="s.db", stored_runs=["A"]).runs == ("A",)


def test_without_predictions_no_run_is_read() -> None:
    assert prediction_scope("B", None, predict_peaks=False, store="s.db").runs == ()


def test_an_unknown_run_is_refused_naming_the_runs_there() -> None:
    stored = [f"sweep{i}" for i in range(8)]
    with pytest.raises(ConfigError) as info:
        prediction_scope("B", "sweep-9", predict_peaks=True, store="runs.db", stored_runs=stored)
    message = str(info.value)
    assert message.startswith("predict_from='sweep-9' is not a run in runs.db (its runs: 'sweep3', ")
    assert "'sweep7' and 3 older): `trainguard runs --store runs.db` lists them" in message
    assert "\n" not in message


def test_an_empty_store_says_it_has_no_runs() -> None:
    with pytest.raises(ConfigError, match=r"is not a run in new\.db \(it has no runs yet\)"):
        prediction_scope("B", "A", predict_peaks=True, store="new.db", stored_runs=[])


@pytest.mark.parametrize(
    ("predict_from", "peaks", "store", "pattern"),
    [
        (
            "A",
            False,
            "s.db",
            r"predict_from='A' seeds the peak model and Policy\(predict_peaks=False\) turns it off",
        ),
        ("A", True, None, r"predict_from='A' reads that run's trials from the store.*none: pass store="),
        ("", True, "s.db", r"predict_from must name a run of the store, such as 'sweep1', not ''"),
        (3, True, "s.db", r"predict_from must name a run .*not 3"),
    ],
)
def test_what_cannot_seed_a_model_is_refused(predict_from, peaks, store, pattern) -> None:
    with pytest.raises(ConfigError, match=pattern):
        prediction_scope("B", predict_from, predict_peaks=peaks, store=store, stored_runs=["A"])


def test_sources_words_name_each_run_this_run_first() -> None:
    assert sources_words({"A": 6, "B": 2}, "B") == "fitted on this run (2 trials) and run 'A' (6 trials)"
    assert sources_words({"A": 1}, "B") == "fitted on run 'A' (1 trial)"
    assert sources_words({}, "B") == "no trials yet"
    assert sources_words({"A": 0, "B": 3}, "B") == "fitted on this run (3 trials)"


def _grid(n: int) -> list[tuple[dict[str, int], int]]:
    return [({"rows": r}, 40 * MiB + r * MiB) for r in range(10, 10 + 10 * n, 10)]


def test_the_forecaster_counts_whose_trials_each_fit_rests_on() -> None:
    prior = _grid(6)
    forecaster = PeakForecaster(prior, prior_runs=["A"] * 6, run="B")
    assert forecaster.predict({"rows": 200}).known
    assert forecaster.fitted_runs == {"A": 6}
    assert forecaster.sources() == "fitted on run 'A' (6 trials)"
    for params, peak in _grid(8)[-2:]:
        forecaster.observe(params, peak)
    forecaster.model()  # refit: 2 new of 6 is more than the growth that triggers one
    assert forecaster.fitted_runs == {"A": 6, "B": 2}
    assert forecaster.describe()["runs"] == {"A": 6, "B": 2}


def test_a_prior_without_runs_is_the_runs_own() -> None:
    forecaster = PeakForecaster(_grid(5), run="B")
    forecaster.model()
    assert forecaster.fitted_runs == {"B": 5}
