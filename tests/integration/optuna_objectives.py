"""Objectives for the guarded-Optuna tests, importable by reference in the workers (this folder is on
the workers' sys.path, as it is on pytest's)."""

from __future__ import annotations

import math
import os
import signal
import time

import optuna

_HOLD: list[bytearray] = []


def quadratic(trial):
    x = trial.suggest_float("x", -10, 10)
    n = trial.suggest_int("n", 1, 4)
    kind = trial.suggest_categorical("kind", ["a", "b"])
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    assert trial.params["x"] == x and trial.params["kind"] == kind
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("number_seen", trial.number)
    assert trial.user_attrs["pid"] == os.getpid()
    return (x - 2) ** 2 + n + (kind == "b") + lr


def tiny(trial):
    return trial.suggest_float("x", 0, 1)


def hoards(trial):
    """Keeps 6 MiB more in its worker on every call (a leak the default policy must recycle)."""
    _HOLD.append(bytearray(6 * 2**20))  # touched: bytearray zero-fills
    return trial.suggest_float("x", 0, 1)


def steps(trial):
    """Reports 6 intermediate values equal to x; prunes when Optuna's pruner says so."""
    x = trial.suggest_float("x", 0, 10)
    for step in range(6):
        trial.report(x + 0.01 * step, step)
        if trial.should_prune():
            trial.set_user_attr("pruned_at", step)
            raise optuna.TrialPruned(f"pruned at step {step}")
    return x


def faulty(trial):
    """What the trial does is its 'fault' param: ok, alloc (past any small limit), sleep, kill."""
    fault = trial.suggest_categorical("fault", ["ok", "alloc", "sleep", "kill"])
    if fault == "alloc":
        for _ in range(400):
            _HOLD.append(bytearray(10 * 2**20))  # 10 MiB, touched
            time.sleep(0.005)
    elif fault == "sleep":
        time.sleep(30)
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return 1.0


def returns(trial):
    """Returns what its 'what' param says: a float, None, NaN, a pair, a string, or raises."""
    what = trial.suggest_categorical("what", ["float", "none", "nan", "pair", "text", "raise"])
    if what == "none":
        return None
    if what == "nan":
        return math.nan
    if what == "pair":
        return 1.0, 2.0
    if what == "text":
        return "high"
    if what == "raise":
        raise ValueError("bad batch size")
    return 0.5


class BatchTooBig(Exception):
    """A user-defined error with its own signature, as study code defines them."""

    def __init__(self, size: int) -> None:
        super().__init__(f"batch {size} does not fit")
        self.size = size


class HugeBatch(BatchTooBig):
    pass


def raises_custom(trial):
    """Raises a user-defined exception (a subclass of it for the 'huge' choice)."""
    kind = trial.suggest_categorical("kind", ["big", "huge"])
    raise (HugeBatch if kind == "huge" else BatchTooBig)(512)


def allocates(trial):
    """Holds an array of ``mb`` MiB for a moment (its peak grows with the param); the larger the
    better, so an unconstrained study drifts to the configs that need the most memory."""
    import numpy as np

    mb = trial.suggest_int("mb", 8, 400)
    lr = trial.suggest_float("lr", 0.0, 1.0)
    block = np.ones(mb * 2**20 // 8)  # touched: ones writes every page
    time.sleep(0.12)
    del block
    return -float(mb) + lr


def counted_width(trial):
    """Appends its trial number to the file ``$TRAINGUARD_TEST_CALLS`` as soon as it is entered, then
    holds ``width`` MiB for a moment; the wider the better, so the sampler is drawn past any limit."""
    import numpy as np

    with open(os.environ["TRAINGUARD_TEST_CALLS"], "a") as calls:
        calls.write(f"{trial.number}\n")
    width = trial.suggest_int("width", 4, 600)
    block = np.ones(width * 2**20 // 8)  # touched: ones writes every page
    time.sleep(0.05)
    del block
    return -float(width)
