"""Guarded calls: one function call or one notebook cell in a warm, supervised worker.

The engine (:class:`CallPool`: Runner slots handed one job at a time through a bridge; its worker
side :class:`BaseSlot`) is shared by ``@trainguard.isolated``, the ``%%trainguard`` cell magic and
``trainguard.optuna.isolated``.
"""

from __future__ import annotations

from trainguard.guarded._calls import GuardedCalls
from trainguard.guarded._function import IsolatedFunction, isolated, make_policy
from trainguard.guarded._pool import BaseJob, CallPool
from trainguard.guarded._send import off_cpu, pickle_inputs, why_unsendable
from trainguard.guarded._slot import BaseSlot, describe
from trainguard.guarded._wire import bridge_family, recv_json, send_json

__all__ = [
    "BaseJob",
    "BaseSlot",
    "CallPool",
    "GuardedCalls",
    "make_policy",
    "IsolatedFunction",
    "describe",
    "isolated",
    "off_cpu",
    "pickle_inputs",
    "bridge_family",
    "recv_json",
    "send_json",
    "why_unsendable",
]
