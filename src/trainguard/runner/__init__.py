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
"""

from __future__ import annotations

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
