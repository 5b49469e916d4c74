"""The guarded runner: many trainings in supervised, recycled worker processes.

::

    import trainguard

    runner = trainguard.Runner(workers=2, policy=trainguard.Policy(memory_limit="6GB", retries=1))
    results = runner.map(train, [{"lr": 1e-3}, {"lr": 1e-2}], name="sweep1")

``Runner`` starts worker processes (spawned, never forked) with their environment set before any
framework import, reuses each for trial after trial, samples its process tree from outside, and
recycles it when the :class:`Policy` says so (count, RSS, growth, or predicted to outgrow its budget
on the next trial). Trials that crash, hang, or cross a hard limit end with their cause recorded;
the run goes on. Every result goes to the store, so the same named run resumes where it stopped.

The names below are loaded on first use (PEP 562): a worker process imports
``trainguard.runner.worker.process``, which is inside this package, and pays only for what it
uses, not for the Runner, its session and its store (about 0.2 s of CPU at every worker start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> (module that defines it, its name there), imported on first attribute access
_LAZY: dict[str, tuple[str, str]] = {
    "flight_summary": ("trainguard._flight", "flight_summary"),
    "Failure": ("trainguard.outcomes", "Failure"),
    "FnSpec": ("trainguard.runner._fnref", "FnSpec"),
    "load_fn": ("trainguard.runner._fnref", "load"),
    "prepare_fn": ("trainguard.runner._fnref", "prepare"),
    "check_params": ("trainguard.runner._params", "check_params"),
    "KERAS_BACKENDS": ("trainguard.runner._runner", "KERAS_BACKENDS"),
    "Runner": ("trainguard.runner._runner", "Runner"),
    "find_allocator": ("trainguard.runner._runner", "find_allocator"),
    "SharedData": ("trainguard.runner._shared", "SharedData"),
    "share": ("trainguard.runner._shared", "share"),
    "BaseBackend": ("trainguard.runner.backends", "BaseBackend"),
    "BaseWorker": ("trainguard.runner.backends", "BaseWorker"),
    "RayBackend": ("trainguard.runner.backends", "RayBackend"),
    "SlurmBackend": ("trainguard.runner.backends", "SlurmBackend"),
    "Device": ("trainguard.runner.device", "Device"),
    "Policy": ("trainguard.runner.policy", "Policy"),
    "Shrink": ("trainguard.runner.policy", "Shrink"),
    "PeakPrediction": ("trainguard.runner.policy._peaks", "PeakPrediction"),
    "PeakForecaster": ("trainguard.runner.session", "PeakForecaster"),
    "RunProgress": ("trainguard.runner.session", "RunProgress"),
    "TrialResult": ("trainguard.runner.session", "TrialResult"),
    "WorkerProgress": ("trainguard.runner.session", "WorkerProgress"),
    "default_run_name": ("trainguard.runner.session", "default_run_name"),
    "device_key": ("trainguard.runner.session", "device_key"),
    "Command": ("trainguard.runner.worker.command", "Command"),
    "TrialContext": ("trainguard.runner.worker.context", "TrialContext"),
    "current_context": ("trainguard.runner.worker.context", "current_context"),
}

__all__ = [
    "Runner",
    "RayBackend",
    "SlurmBackend",
    "BaseBackend",
    "BaseWorker",
    "Policy",
    "Shrink",
    "PeakPrediction",
    "Command",
    "Device",
    "TrialResult",
    "Failure",
    "RunProgress",
    "WorkerProgress",
    "default_run_name",
    "find_allocator",
    "share",
    "SharedData",
    "TrialContext",
    "current_context",
    "flight_summary",
    # for the library's other packages (compare, fit, optuna, the CLI): functions by reference,
    # params checked as the Runner checks them, the device key that remembered sizes are kept under
    "FnSpec",
    "prepare_fn",
    "load_fn",
    "check_params",
    "KERAS_BACKENDS",
    "device_key",
    # the peak model the session fits, for clients that run trials of their own (Optuna's)
    "PeakForecaster",
]


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'trainguard.runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from trainguard._flight import flight_summary
    from trainguard.outcomes import Failure
    from trainguard.runner._fnref import FnSpec
    from trainguard.runner._fnref import load as load_fn
    from trainguard.runner._fnref import prepare as prepare_fn
    from trainguard.runner._params import check_params
    from trainguard.runner._runner import KERAS_BACKENDS, Runner, find_allocator
    from trainguard.runner._shared import SharedData, share
    from trainguard.runner.backends import BaseBackend, BaseWorker, RayBackend, SlurmBackend
    from trainguard.runner.device import Device
    from trainguard.runner.policy import Policy, Shrink
    from trainguard.runner.policy._peaks import PeakPrediction
    from trainguard.runner.session import (
        PeakForecaster,
        RunProgress,
        TrialResult,
        WorkerProgress,
        default_run_name,
        device_key,
    )
    from trainguard.runner.worker.command import Command
    from trainguard.runner.worker.context import TrialContext, current_context
