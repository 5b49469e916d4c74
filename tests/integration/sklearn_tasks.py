"""Estimators and tasks that trainguard's joblib backend runs in workers (imported there by name)."""

from __future__ import annotations

import os
import threading

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge


class Hoarder(RegressorMixin, BaseEstimator):
    """A Ridge whose fit first holds ``hoard_mb`` MiB of touched memory (0: none)."""

    def __init__(self, alpha: float = 1.0, hoard_mb: int = 0):
        self.alpha = alpha
        self.hoard_mb = hoard_mb

    def fit(self, X, y):
        if self.hoard_mb:
            block = np.ones(self.hoard_mb * (1 << 20) // 8)
            import time

            time.sleep(5.0)  # the supervisor samples and kills it meanwhile
            del block
        self.ridge_ = Ridge(alpha=self.alpha).fit(X, y)
        return self

    def predict(self, X):
        return self.ridge_.predict(X)


class Locked(RegressorMixin, BaseEstimator):
    """An estimator whose parameter is a lambda closing over a lock: it cannot be pickled."""

    def __init__(self, transform=None):
        self.transform = transform

    def fit(self, X, y):
        return self

    def predict(self, X):
        return np.zeros(len(X))


def locked_transform():
    lock = threading.Lock()
    return lambda x: (lock, x)[1]


def pid(_: int) -> int:
    return os.getpid()


def hoard(mb: int) -> int:
    block = np.ones(mb * (1 << 20) // 8)
    import time

    time.sleep(5.0)
    return int(block.sum())


def which_trial(_: int) -> tuple[int, int | None]:
    """(this worker's pid, the slot running the task): tasks that share a pair ran in one trial,
    one batch."""
    from trainguard.integrations._task_worker import current_slot

    return os.getpid(), current_slot()


def hoard_once(marker: str, mb: int) -> tuple[int, int | None]:
    """Hoard ``mb`` MiB (and wait to be killed) the first time, when ``marker`` does not exist yet;
    when run again, :func:`which_trial`."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        hoard(mb)
    return which_trial(0)
