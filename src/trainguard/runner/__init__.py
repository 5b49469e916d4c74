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

from trainguard.runner._command import Command
from trainguard.runner._context import TrialContext
from trainguard.runner._runner import Runner, find_allocator
from trainguard.runner._shared import SharedData, share
from trainguard.runner._supervisor import RunProgress, TrialResult, WorkerProgress, default_run_name
from trainguard.runner.device import Device
from trainguard.runner.policy import Policy, Shrink

__all__ = [
    "Runner",
    "Policy",
    "Shrink",
    "Command",
    "Device",
    "TrialResult",
    "RunProgress",
    "WorkerProgress",
    "default_run_name",
    "find_allocator",
    "share",
    "SharedData",
    "TrialContext",
]
