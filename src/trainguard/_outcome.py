"""The fields a finished trial has wherever it is read: in the store (``TrialRecord``) and from a
Runner (``TrialResult``). Both derive from :class:`TrialOutcome`, so the two never drift apart;
it lives at the root because the store and the runner both build on it and neither on the other's
internals (a Runner's worker imports the runner but not the store)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.outcomes import Failure

__all__ = ["TrialOutcome"]


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """What a trial came to, as the store keeps it and a Runner reports it (:class:`TrialRecord`
    and ``TrialResult`` both carry these fields, first and in this order)."""

    index: int
    params: Any
    status: str
    value: Any
    error: Failure | None
    attempts: int
    peak_rss_bytes: int | None
    worker_id: int | None
    duration_s: float | None
