"""trainguard's joblib backend with real scikit-learn: every task in a guarded worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from _needs import needs

needs("sklearn")
sys.path.insert(0, os.path.dirname(__file__))

import joblib  # noqa: E402
from sklearn.datasets import make_regression  # noqa: E402
from sklearn.exceptions import FitFailedWarning  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn_tasks import Hoarder, Locked, hoard, locked_transform, pid  # noqa: E402

import trainguard.joblib  # noqa: E402
from trainguard.exceptions import ConfigError, MemoryLimitError, TrainguardWarning  # noqa: E402

trainguard.joblib.register()

GRID = {"alpha": [0.01, 0.1, 1.0, 10.0]}


@pytest.fixture(scope="module")
def data():
    return make_regression(n_samples=160, n_features=8, noise=2.0, random_state=0)


def _same_results(ref: dict, got: dict) -> None:
    assert set(ref) == set(got)
    for key in ref:
        if "time" in key:
            continue
        assert np.array_equal(np.asarray(ref[key]), np.asarray(got[key])), key


@pytest.mark.slow
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_results_equal_the_default_backend_and_run_in_workers(data, n_jobs):
    X, y = data
    ref = GridSearchCV(Ridge(), GRID, cv=5, n_jobs=1).fit(X, y)
    with joblib.parallel_backend("trainguard", n_jobs=n_jobs, memory_limit="2GB"):
        got = GridSearchCV(Ridge(), GRID, cv=5).fit(X, y)
        pids = joblib.Parallel()(joblib.delayed(pid)(i) for i in range(4))
    _same_results(ref.cv_results_, got.cv_results_)
    assert got.best_params_ == ref.best_params_
    # isolation is the point, also with one job: no task ran in this process
    assert os.getpid() not in pids
    assert len(set(pids)) <= n_jobs


@pytest.mark.slow
def test_a_fit_killed_for_memory_fails_as_scikit_learn_expects(data):
    X, y = data
    grid = {"alpha": [1.0], "hoard_mb": [0, 900]}
    with joblib.parallel_backend("trainguard", n_jobs=1, memory_limit="500MB"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            search = GridSearchCV(Hoarder(), grid, cv=2, error_score=np.nan, refit=False).fit(X, y)
        scores = search.cv_results_["mean_test_score"]
        assert np.isfinite(scores[0]) and np.isnan(scores[1])
        failed = [w for w in caught if issubclass(w.category, FitFailedWarning)]
        assert failed and "MemoryLimitError" in str(failed[0].message)
        assert "memory" in str(failed[0].message)
        # error_score="raise": the caller sees the error itself
        with pytest.raises(MemoryLimitError, match="Hoarder fit"):
            GridSearchCV(Hoarder(), {"hoard_mb": [900]}, cv=2, error_score="raise").fit(X, y)
        # any other task: the error, with the peak
        with pytest.raises(MemoryLimitError) as err:
            joblib.Parallel()(joblib.delayed(hoard)(900) for _ in range(1))
        assert err.value.peak_rss_bytes and err.value.peak_rss_bytes > 500 * 10**6


def test_an_unsendable_estimator_is_named_in_one_line_before_any_fold(data):
    X, y = data
    with joblib.parallel_backend("trainguard", n_jobs=2):
        with pytest.raises(ConfigError) as err:
            cross_val_score(Locked(transform=locked_transform()), X, y, cv=3)
    text = str(err.value)
    assert "\n" not in text
    assert "Locked's parameter transform=" in text and "lock" in text


def test_n_jobs_minus_one_needs_a_budget_and_says_what_it_runs(data):
    X, y = data
    with joblib.parallel_backend("trainguard", n_jobs=-1):
        with pytest.raises(ConfigError, match="memory_budget='8GB'"):
            cross_val_score(Ridge(), X, y, cv=2)
    from trainguard.integrations.joblib_backend import TrainguardBackend

    backend = TrainguardBackend(memory_budget="3GB")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert backend.effective_n_jobs(-1) >= 1
        backend.effective_n_jobs(-1)
    said = [w for w in caught if issubclass(w.category, TrainguardWarning)]
    assert (
        len(said) == 1
        and "memory_budget=" in str(said[0].message)
        and "not one per core" in str(said[0].message)
    )


def test_bad_options_fail_at_parallel_backend():
    with pytest.raises(ConfigError, match="memory_limit"):
        with joblib.parallel_backend("trainguard", memory_limit="lots"):
            pass
    with pytest.raises(ConfigError, match="workers="):
        with joblib.parallel_backend("trainguard", workers=0):
            pass
    with pytest.raises(ConfigError, match="not both"):
        with joblib.parallel_backend("trainguard", memory_limit="1GB", policy=trainguard.Policy()):
            pass


def test_without_scikit_learn_register_names_the_extra():
    code = (
        "import sys; sys.modules['joblib'] = None\n"
        "import trainguard.joblib\n"
        "try:\n    trainguard.joblib.register()\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout
    assert out.startswith("MissingDependencyError") and "scikit-learn" in out
    assert "pip install -e '.[sklearn]'" in out
