"""Many small tasks on trainguard's joblib backend: batched as on loky, each batch still guarded."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from _needs import needs

needs("sklearn")
sys.path.insert(0, os.path.dirname(__file__))

import joblib  # noqa: E402
from sklearn.datasets import make_regression  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn_tasks import hoard, hoard_once, which_trial  # noqa: E402

import trainguard.joblib  # noqa: E402
from _waits import process_starts, wait_gone  # noqa: E402
from trainguard.exceptions import MemoryLimitError  # noqa: E402
from trainguard.integrations import _warm_pools  # noqa: E402

trainguard.joblib.register()


@pytest.fixture(scope="module")
def data():
    return make_regression(n_samples=200, n_features=10, noise=2.0, random_state=0)


@pytest.mark.slow
def test_a_search_of_many_small_fits_equals_loky_and_runs_in_batches(data):
    X, y = data
    grid = {"alpha": list(np.logspace(-3, 3, 40))}
    with joblib.parallel_backend("loky", n_jobs=2):
        ref = GridSearchCV(Ridge(), grid, cv=5).fit(X, y)
    with joblib.parallel_backend("trainguard", n_jobs=2, memory_limit="2GB"):
        got = GridSearchCV(Ridge(), grid, cv=5).fit(X, y)
        trials = joblib.Parallel()(joblib.delayed(which_trial)(i) for i in range(400))
    for key in ref.cv_results_:
        if "time" not in key:
            assert np.array_equal(np.asarray(ref.cv_results_[key]), np.asarray(got.cv_results_[key])), key
    assert got.best_params_ == ref.best_params_
    # every task ran in a worker, and joblib's auto-batching put several tasks in one trial
    assert os.getpid() not in {pid for pid, _ in trials}
    assert len(set(trials)) < len(trials) / 2


@pytest.mark.slow
def test_a_task_over_the_limit_in_a_batch_is_killed_with_the_limit_message():
    tasks = [joblib.delayed(which_trial)(i) for i in range(20)]
    tasks[13] = joblib.delayed(hoard)(900)
    with joblib.parallel_backend("trainguard", n_jobs=1, memory_limit="500MB"):
        with pytest.raises(MemoryLimitError) as err:
            joblib.Parallel(batch_size=8)(tasks)
    # the batch's trial was killed; its tasks were rerun one a trial, and only the hoard's failed
    assert "(hoard)" in str(err.value) and "which_trial" not in str(err.value)
    assert "memory" in str(err.value)
    assert err.value.peak_rss_bytes and err.value.peak_rss_bytes > 500 * 10**6


@pytest.mark.slow
def test_the_other_tasks_of_a_killed_batch_come_back_as_if_run_alone(tmp_path):
    tasks = [joblib.delayed(which_trial)(i) for i in range(20)]
    tasks[13] = joblib.delayed(hoard_once)(str(tmp_path / "hoarded"), 900)
    with joblib.parallel_backend("trainguard", n_jobs=1, memory_limit="500MB"):
        out = joblib.Parallel(batch_size=8)(tasks)
    # the batch that held the hoard was killed; its tasks were rerun one a trial: every result came
    # back, the hoard (run again, it found its marker) in a trial of its own
    assert (tmp_path / "hoarded").exists()
    assert os.getpid() not in {pid for pid, _ in out}
    assert out.count(out[13]) == 1
    # tasks of the other batches shared their trials (without the rerun, the kill of the batch
    # would have raised MemoryLimitError from this call)
    assert len(set(out)) < len(out)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _slope(backend: str, calls: int) -> float:
    """Bytes a Parallel call of 100 small tasks leaves in the caller: the least-squares slope of
    the caller's RSS over the calls after a warm-up of three."""
    rss = []
    for i in range(calls + 3):
        with joblib.parallel_backend(backend, n_jobs=2):
            joblib.Parallel()(joblib.delayed(which_trial)(j) for j in range(100))
        if i >= 3:
            rss.append(_rss_bytes())
    return float(np.polyfit(np.arange(len(rss)), rss, 1)[0])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_the_caller_stays_flat_over_many_parallel_calls():
    loky = _slope("loky", 12)
    guarded = _slope("trainguard", 12)
    # within 64 KiB a call of loky's own slope (a leak of one task's future per task would be
    # 100 objects a call; a pool or its threads left behind a call, megabytes)
    assert guarded <= max(loky, 0.0) + 64 * 1024, (guarded, loky)


def _pids(n: int = 6) -> set[int]:
    return {pid for pid, _ in joblib.Parallel()(joblib.delayed(which_trial)(i) for i in range(n))}


@pytest.mark.slow
def test_a_second_call_with_the_same_options_runs_in_the_warm_workers(tmp_path):
    _warm_pools.close_kept()
    with joblib.parallel_backend("trainguard", n_jobs=2, memory_limit="1GB"):
        first = _pids()
    with joblib.parallel_backend("trainguard", n_jobs=2, memory_limit="1GB"):
        with process_starts() as started:
            second = _pids()
    assert started == [] and second <= first
    # other options: a pool of its own; once it is kept, the one it replaces has its workers ended
    with joblib.parallel_backend("trainguard", n_jobs=1, memory_limit="900MB"):
        third = _pids()
    assert not third & first
    wait_gone(first, 30.0, "the replaced pool's workers")
    # a pool that keeps a history starts and ends its own workers in each call
    for _ in range(2):
        with joblib.parallel_backend("trainguard", n_jobs=1, store=str(tmp_path / "runs.db")):
            with process_starts() as started:
                _pids(2)
        assert started
    _warm_pools.close_kept()
    wait_gone(third, 30.0, "the kept pool's workers, closed")
