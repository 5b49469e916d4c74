"""skorch (PyTorch on the CPU) under trainguard's joblib backend: the same scores as the default
backend, every fold in a worker."""

from __future__ import annotations

import os
import sys

import pytest

from _needs import needs

needs("skorch")
needs("torch")
sys.path.insert(0, os.path.dirname(__file__))

import joblib  # noqa: E402
import skorch_models as models  # noqa: E402
import torch  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402

import trainguard.joblib  # noqa: E402


@pytest.mark.slow
def test_cross_val_score_of_a_skorch_regressor_equals_the_default_backends():
    trainguard.joblib.register()
    X, y = models.data()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker's threads: the same float sums
    try:
        plain = cross_val_score(models.regressor(), X, y, cv=3)
    finally:
        torch.set_num_threads(threads)
    with joblib.parallel_backend("trainguard", n_jobs=1, threads=1, memory_limit="2GB"):
        guarded = cross_val_score(models.regressor(), X, y, cv=3)
    assert guarded == pytest.approx(plain, abs=1e-5)
