"""The supervisor's memory-pressure bookkeeping, one entry per busy worker: when pressure was raised
and why, whether the worker was told, and, when it resolves, what the trial did and what it cost.

The sampler thread asks :meth:`PressureTracker.since` for the pressure on a trial, decides through
the pure :func:`~trainguard.runner.policy.limit_verdict` and tells :meth:`PressureTracker.raised`
of new pressure (a remote worker's is decided next to it and adopted the same way); the loop thread calls
:meth:`PressureTracker.resolve` when the trial checkpoints, finishes, fails or is killed, and
records the returned event (the store has one writer). No process, file or store here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainguard.runner.policy import LimitReading, PressureSince, growth_rate, outcome_text, pressure_verdict

if TYPE_CHECKING:
    from trainguard.runner.policy import KillDecision, Policy, PressureDecision

__all__ = ["PressureTracker", "PressureState", "PressureEvent"]

Action = Literal["checkpointed", "finished", "checkpoint_failed", "ignored", "grace_expired"]


@dataclass(frozen=True, slots=True)
class PressureState:
    """Pressure raised on one worker's trial: the decision, when (monotonic seconds), whether the
    signal reached the worker, and the trial's stage and attempt start then."""

    decision: PressureDecision
    raised_s: float
    delivered: bool
    index: int
    attempt: int
    attempt_started_s: float
    last_checkpoint_s: float | None


@dataclass(frozen=True, slots=True)
class PressureEvent:
    """The event recorded when a pressure resolves (kind ``"pressure"``)."""

    message: str
    data: dict[str, Any]
    index: int


class PressureTracker:
    """Pressure per worker id, from :class:`Policy`'s ``soft_limit``, ``pressure_horizon`` and
    ``pressure_grace``. Thread-safe: the sampler observes, the loop resolves. It keeps the state;
    what to do with a sample is :func:`~trainguard.runner.policy.limit_verdict`'s."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._states: dict[int, PressureState] = {}
        self._checkpoints: dict[int, float] = {}  # worker id -> when its trial last checkpointed

    @property
    def enabled(self) -> bool:
        return self.policy.soft_limit is not None

    def since(self, worker_id: int, *, index: int, attempt: int) -> PressureSince | None:
        """The pressure raised on this worker's running trial (``index``, ``attempt``), for
        :func:`~trainguard.runner.policy.limit_verdict`; a state left from an earlier trial of the
        worker is dropped."""
        with self._lock:
            state = self._states.get(worker_id)
            if state is not None and (state.index, state.attempt) != (index, attempt):
                self._states.pop(worker_id, None)
                return None
            return None if state is None else PressureSince(state.raised_s, state.decision.message)

    def raised(
        self,
        worker_id: int,
        decision: PressureDecision,
        *,
        index: int,
        attempt: int,
        attempt_started_s: float,
        now_s: float,
        delivered: bool = False,
    ) -> None:
        """Pressure was raised on the worker's trial now (by a verdict, here or next to the worker)."""
        with self._lock:
            self._states[worker_id] = PressureState(
                decision,
                now_s,
                delivered,
                index,
                attempt,
                attempt_started_s,
                self._checkpoints.get(worker_id),
            )

    def observe(
        self,
        worker_id: int,
        *,
        index: int,
        attempt: int,
        attempt_started_s: float,
        rss_bytes: int,
        series: list[tuple[float, int]],
        now_s: float,
    ) -> PressureDecision | KillDecision | None:
        """One sample of a busy worker, its soft limit only (:func:`~trainguard.runner.policy.pressure_verdict`,
        the part of the verdict this tracker's state decides): a :class:`PressureDecision` when
        pressure is raised now (kept; the caller signals the worker, then :meth:`delivered`), a
        :class:`KillDecision` when ``pressure_grace`` ran out without a checkpoint, else None."""
        if not self.enabled:
            return None
        since = self.since(worker_id, index=index, attempt=attempt)
        reading = LimitReading(rss_bytes, rate_bytes_per_s=growth_rate(series), now_s=now_s)
        decision, kill = pressure_verdict(self.policy, reading, pressure=since)
        if decision is not None:
            self.raised(
                worker_id,
                decision,
                index=index,
                attempt=attempt,
                attempt_started_s=attempt_started_s,
                now_s=now_s,
            )
        return decision or kill

    def delivered(self, worker_id: int, delivered: bool) -> None:
        with self._lock:
            state = self._states.get(worker_id)
            if state is not None:
                self._states[worker_id] = PressureState(
                    state.decision,
                    state.raised_s,
                    delivered,
                    state.index,
                    state.attempt,
                    state.attempt_started_s,
                    state.last_checkpoint_s,
                )

    def active(self, worker_id: int) -> PressureState | None:
        with self._lock:
            return self._states.get(worker_id)

    def checkpointed(self, worker_id: int, now_s: float) -> None:
        """A checkpoint of the worker's trial was committed (what a later kill loses starts here)."""
        with self._lock:
            self._checkpoints[worker_id] = now_s

    def resolve(
        self,
        worker_id: int,
        action: Action,
        *,
        now_s: float,
        rss_bytes: int | None = None,
        stage: int | None = None,
    ) -> PressureEvent | None:
        """The pressure on this worker ends with ``action``: the event to record (None when there
        was no pressure). Cost: seconds from the pressure to the checkpoint and the memory grown
        meanwhile; for a kill, the work lost (seconds since the last checkpoint, or since the
        attempt started)."""
        with self._lock:
            state = self._states.pop(worker_id, None)
            if action != "checkpointed":
                self._checkpoints.pop(worker_id, None)
        if state is None:
            return None
        waited = now_s - state.raised_s
        grown = None if rss_bytes is None else int(rss_bytes) - state.decision.rss_bytes
        data: dict[str, Any] = {
            "rule": state.decision.rule,
            "action": action,
            "delivered": state.delivered,
            "attempt": state.attempt,
            "raised_rss_bytes": state.decision.rss_bytes,
            "waited_s": waited,
            **{k: v for k, v in state.decision.values.items() if k != "rss_bytes"},
        }
        if grown is not None:
            data["grown_bytes"] = grown
        if stage is not None:
            data["stage"] = stage
        if action in ("ignored", "grace_expired", "checkpoint_failed"):
            since = (
                state.last_checkpoint_s if state.last_checkpoint_s is not None else state.attempt_started_s
            )
            data["work_lost_s"] = max(0.0, now_s - since)
        else:
            data["work_lost_s"] = 0.0
        did = outcome_text(action, waited_s=waited, stage=stage, grown_bytes=grown)
        if not state.delivered and action == "ignored":
            did += " (the worker could not be told: a command trial, or a backend that cannot signal it)"
        message = f"trial {state.index} attempt {state.attempt} under memory pressure ({state.decision.message}): {did}"
        return PressureEvent(message, data, state.index)

    def forget(self, worker_id: int) -> None:
        with self._lock:
            self._states.pop(worker_id, None)
            self._checkpoints.pop(worker_id, None)
