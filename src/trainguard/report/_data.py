"""The reports' data, apart from their rendering: frozen, typed records built from the store (a
run), from a leak check's report, or from a comparison, and read by the renderers and by
``trainguard show``.

Everything a report decides about what it shows is decided here, where a test can build it from a
real store and check it without reading HTML: which worker slots there are and what each shows,
the time axis with its idle gaps cut, the memory axis, each trial's status and cause in words, each
worker's growth per trial (Theil-Sen with its 95 % interval, :mod:`trainguard._slope`), the policy
values a run changed (against :data:`trainguard._policy_defaults.POLICY_DEFAULTS`), and the
environment the run recorded. The renderers (``_run.py``, ``_leak.py``, ``_compare.py``) only turn
these records into markup. Nothing here imports the runner or the leak check: they hand their
results to the report package, never the other way round.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainguard._policy_defaults import POLICY_DEFAULTS
from trainguard._slope import evenly_sampled
from trainguard.outcomes import ATTEMPT_WORDS, Failure, WorkerReason
from trainguard.report._axes import TimeCuts, idle_gaps, memory_axis

if TYPE_CHECKING:
    from trainguard.store import (
        AttemptRecord,
        EventRecord,
        RunInfo,
        RunSummary,
        Sample,
        Store,
        TrialRecord,
        WorkerRecord,
    )

__all__ = [
    "RunRecords",
    "RunReportData",
    "Timeline",
    "SlotMemory",
    "TrialRow",
    "WorkerGrowth",
    "PolicyValue",
    "per_session",
    "GROWTH_POINTS",
    "evenly_sampled",
    "growth_per_worker",
    "trial_cause",
]

#: how many of the run's most recent events a report lists
MAX_EVENTS = 5000
#: about two readings per pixel column of a chart, each stretch's highest kept: peaks survive
CHART_BUCKETS = 1800
#: the attempts whose peaks measure a worker's growth: a kill or a crash ends the worker with a
#: peak that is the failure, not the growth
GROWTH_STATUSES = frozenset({"ok", "exception", "not_serializable", "framework_oom"})
#: the worker ends a report marks as a kill or a crash
KILL_REASONS = frozenset(r.value for r in WorkerReason if r.is_kill)
#: Trials of one worker the growth slope reads: Theil-Sen pairs every two points (O(n**2) memory),
#: so a 20,000-trial worker needed gigabytes; an even sample of 512 keeps each at its trial number.
GROWTH_POINTS = 512

#: one drawn stroke: (position on the time axis, bytes) pairs
Segment = tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class RunRecords:
    """A run's own rows, as the store keeps them: what ``trainguard show`` and the run report both
    read (``show`` reads its other sections itself, the report the rest of :class:`RunReportData`)."""

    info: RunInfo
    summary: RunSummary | None
    trials: tuple[TrialRecord, ...]
    workers: tuple[WorkerRecord, ...]

    @classmethod
    def from_store(cls, store: Store, info: RunInfo) -> RunRecords:
        run_id = info.run_id
        return cls(
            info=info,
            summary=store.summary(run_id),
            trials=tuple(store.trials(run_id)),
            workers=tuple(store.workers(run_id)),
        )


@dataclass(frozen=True, slots=True)
class Timeline:
    """The run report's time axis: seconds since ``t0``, with the idle gaps between sessions cut."""

    t0: float
    t_end: float
    cuts: TimeCuts

    def at(self, unix_s: float) -> float:
        """Where the moment ``unix_s`` lies on the axis."""
        return self.cuts.at(unix_s - self.t0)

    @property
    def gaps(self) -> tuple[tuple[float, float], ...]:
        return self.cuts.gaps

    @property
    def x_range(self) -> tuple[float, float]:
        return (0.0, max(1.0, self.at(self.t_end)))


@dataclass(frozen=True, slots=True)
class SlotMemory:
    """One worker slot's chart: its workers in the order they started, the memory each drew (one
    segment per worker, on the time axis) and the attempts they ran."""

    slot: int
    workers: tuple[WorkerRecord, ...]
    rss: tuple[Segment, ...]
    uss: tuple[Segment, ...]
    gpu: tuple[Segment, ...]
    attempts: tuple[AttemptRecord, ...]

    @property
    def peak_rss_bytes(self) -> float | None:
        return max((v for seg in self.rss for _, v in seg), default=None)


@dataclass(frozen=True, slots=True)
class TrialRow:
    """One trial as the report lists it: ``status`` is ``"running"`` for a pending trial with an
    attempt running, ``cause`` a failed trial's cause in words, ``history`` its attempts."""

    record: TrialRecord
    status: str
    cause: str
    history: str
    #: the peak model's prediction as its latest attempt started, or was not started (``acted``:
    #: ``"skipped"``, ``"shrunk"``): ``peak_bytes``, ``low_bytes``, ``high_bytes``; None without one
    prediction: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WorkerGrowth:
    """The growth of one worker's per-trial peaks: Theil-Sen slope (bytes a trial) with its 95 %
    interval (None where unknown), over the trials it survived."""

    worker: int
    slot: int
    trials: int
    first_peak: int | None
    last_peak: int | None
    slope: float | None
    low: float | None
    high: float | None
    end: str


@dataclass(frozen=True, slots=True)
class PolicyValue:
    """One policy setting of the run; ``changed`` when it differs from the default. ``per_session``:
    ``((session, value), ...)`` when the run's sessions ran with different values (empty otherwise)."""

    key: str
    value: Any
    changed: bool
    per_session: tuple[tuple[int, Any], ...] = ()


def per_session(sessions: Sequence[Any], path: tuple[str, ...]) -> tuple[tuple[int, Any], ...]:
    """``((session, value), ...)`` of one setting (``("policy", "memory_limit")``) when the sessions
    ran with different values; ``()`` when they all ran with one."""
    values = []
    for session in sessions:
        value: Any = session.config
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        values.append((int(session.session), value))
    return tuple(values) if len({repr(v) for _, v in values}) > 1 else ()


@dataclass(frozen=True, slots=True)
class RunReportData:
    """Everything the run report shows, read from the store once (:meth:`from_store`)."""

    records: RunRecords
    attempts: tuple[AttemptRecord, ...]
    #: the events the report lists (not the per-trial statistics nor the environment record)
    events: tuple[EventRecord, ...]
    in_progress: bool
    timeline: Timeline
    slots: tuple[SlotMemory, ...]
    #: the memory charts' y range, and whether the memory limit is near enough to draw
    memory_range: tuple[float, float]
    show_limit: bool
    policy: Mapping[str, Any]
    policy_values: tuple[PolicyValue, ...]
    trials: tuple[TrialRow, ...]
    growth: tuple[WorkerGrowth, ...]
    recycles: int
    #: the recycles whose cause the policy named: ("retention", n), ("a leak", n), those with n > 0
    recycle_causes: tuple[tuple[str, int], ...]
    kills: int
    #: the environment the run recorded as it started, or (``environment_recorded`` False, a store
    #: of older trainguard) the one where the report is made
    environment: Mapping[str, Any]
    environment_recorded: bool
    #: whether the peak model predicted any trial's peak (the trials table's prediction columns)
    predicted: bool = False
    #: the trials ended ``predicted_over_limit``: never started, their predicted low end over the limit
    not_started: tuple[int, ...] = ()
    #: the settings each session of the run ran with (a resume with other flags adds one), and the
    #: session each trial ran in: ``((index, session), ...)``
    sessions: tuple[Any, ...] = ()
    trial_sessions: tuple[tuple[int, int], ...] = ()

    @property
    def settings_differ(self) -> bool:
        """Whether the run's sessions ran with different settings."""
        return len({repr(s.config) for s in self.sessions}) > 1

    @property
    def info(self) -> RunInfo:
        return self.records.info

    @property
    def summary(self) -> RunSummary | None:
        return self.records.summary

    @property
    def workers(self) -> tuple[WorkerRecord, ...]:
        return self.records.workers

    @property
    def config(self) -> Mapping[str, Any]:
        return self.records.info.config or {}

    @property
    def memory_limit(self) -> int | None:
        return self.policy.get("memory_limit")

    @property
    def gpu_memory_limit(self) -> int | None:
        return self.policy.get("gpu_memory_limit")

    @classmethod
    def from_store(
        cls,
        store: Store,
        info: RunInfo,
        *,
        environment_now: Callable[[], Mapping[str, Any]] | None = None,
        now: float | None = None,
    ) -> RunReportData:
        """The report's data of run ``info``. ``environment_now`` is called only when the store holds
        no environment record of the run; ``now`` (default: the clock) bounds an in-progress run."""
        run_id = info.run_id
        records = RunRecords.from_store(store, info)
        attempts = tuple(store.attempts(run_id))
        predictions = store.predictions(run_id)  # the peak model's, by trial (empty without one)
        events = store.events(run_id, limit=MAX_EVENTS, kinds=None)
        samples = store.sample_envelope(run_id, buckets=CHART_BUCKETS)
        env_events = [e for e in events if e.kind == "environment" and isinstance(e.data, dict)]
        if not env_events:
            env_events = [e for e in store.events(run_id, kinds=["environment"]) if isinstance(e.data, dict)]
        in_progress = info.status == "running"
        timeline = _timeline(info, samples, attempts, in_progress, time.time() if now is None else now)
        policy = (info.config or {}).get("policy") or {}
        sessions = tuple(store.session_settings(run_id))
        summary = records.summary
        peaks = [summary.peak_rss_bytes if summary else None]
        peaks += [s.rss_bytes for s in samples if s.rss_bytes > 0] + [
            s.gpu_bytes for s in samples if s.gpu_bytes
        ]
        memory_range, show_limit = memory_axis([float(v) for v in peaks if v], policy.get("memory_limit"))
        ended = [w for w in records.workers if w.ended_at is not None]
        if env_events:
            environment: Mapping[str, Any] = env_events[-1].data or {}
        else:
            environment = (environment_now() if environment_now is not None else None) or {}
        return cls(
            records=records,
            attempts=attempts,
            events=tuple(e for e in events if e.kind not in ("trial_stats", "environment")),
            in_progress=in_progress,
            timeline=timeline,
            slots=_slots(records.workers, samples, attempts, timeline),
            memory_range=memory_range,
            show_limit=show_limit,
            policy=policy,
            policy_values=tuple(
                PolicyValue(
                    key,
                    value,
                    value != POLICY_DEFAULTS.get(key, object()),
                    per_session(sessions, ("policy", key)),
                )
                for key, value in policy.items()
            ),
            trials=_trial_rows(records.trials, attempts, predictions),
            growth=tuple(growth_per_worker(attempts, records.workers)),
            recycles=sum(w.reason == WorkerReason.RECYCLED for w in ended),
            recycle_causes=_recycle_causes(records.workers),
            kills=sum(w.reason in KILL_REASONS for w in ended),
            environment=environment,
            environment_recorded=bool(env_events),
            predicted=bool(predictions),
            not_started=tuple(
                t.index
                for t in records.trials
                if t.error is not None and t.error.status == "predicted_over_limit"
            ),
            sessions=sessions,
            trial_sessions=tuple(sorted(store.trial_sessions(run_id).items())),
        )


def _recycle_causes(workers: Sequence[WorkerRecord]) -> tuple[tuple[str, int], ...]:
    causes = (("retention", "retention"), ("a leak", "leak"))
    recycled = [w for w in workers if w.reason == WorkerReason.RECYCLED]
    counts = ((word, sum((w.detail or {}).get("cause") == cause for w in recycled)) for word, cause in causes)
    return tuple((word, n) for word, n in counts if n)


def _timeline(
    info: RunInfo, samples: Sequence[Sample], attempts: Sequence[AttemptRecord], in_progress: bool, now: float
) -> Timeline:
    # samples and attempts normally follow the run's creation; a store written by another clock
    # (or a synthetic one) must not push them off the chart
    t0 = min([info.created_at] + [s.time for s in samples[:1]] + [a.started_at for a in attempts])
    t_end = max(
        [info.finished_at or 0.0, info.updated_at]
        + [s.time for s in samples[-1:]]
        + [a.finished_at or 0.0 for a in attempts]
    )
    if in_progress:
        t_end = max(t_end, min(now, info.updated_at + 5.0))
    cuts = idle_gaps(
        [(s.time - t0, s.time - t0) for s in samples]
        + [(a.started_at - t0, (a.finished_at or t_end) - t0) for a in attempts]
        + [(0.0, 0.0), (t_end - t0, t_end - t0)]
    )
    return Timeline(t0, t_end, cuts)


def slot_of(worker: WorkerRecord) -> int:
    """The worker slot a worker ran in (its id, for stores from before slots were recorded)."""
    slot = (worker.config or {}).get("slot")
    return int(slot) if isinstance(slot, int) and not isinstance(slot, bool) else int(worker.worker_id)


def _slots(
    workers: Sequence[WorkerRecord],
    samples: Sequence[Sample],
    attempts: Sequence[AttemptRecord],
    timeline: Timeline,
) -> tuple[SlotMemory, ...]:
    by_worker: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        by_worker[s.worker_id].append(s)
    known = {w.worker_id for w in workers}
    slots: dict[int, list[WorkerRecord]] = defaultdict(list)
    for w in workers:
        slots[slot_of(w)].append(w)
    for wid in by_worker:
        if wid not in known:
            slots.setdefault(wid, [])  # samples of a worker the store has no row of: a slot of their own
    out = []
    at = timeline.at
    for slot in sorted(slots):
        ids = [w.worker_id for w in slots[slot]] or [slot]
        rss, uss, gpu = [], [], []
        for wid in ids:
            rows = by_worker.get(wid, [])
            rss.append(tuple((at(s.time), float(s.rss_bytes)) for s in rows if s.rss_bytes > 0))
            u = tuple((at(s.time), float(s.uss_bytes)) for s in rows if s.uss_bytes is not None)
            if u:
                uss.append(u)
            g = tuple((at(s.time), float(s.gpu_bytes)) for s in rows if s.gpu_bytes is not None)
            if g and any(v for _, v in g):
                gpu.append(g)
        wids = set(ids)
        out.append(
            SlotMemory(
                slot=slot,
                workers=tuple(slots[slot]),
                rss=tuple(rss),
                uss=tuple(uss),
                gpu=tuple(gpu),
                attempts=tuple(a for a in attempts if a.worker_id in wids),
            )
        )
    return tuple(out)


def trial_cause(status: str, error: Failure | None) -> str:
    """A failed trial's cause in words: what ended it and the message it left ("" for a trial that
    did not fail)."""
    if status in ("ok", "pending"):
        return ""
    kind = error.status if error is not None else ""
    words = ATTEMPT_WORDS.get(kind, kind.replace("_", " ")) if kind else ""
    text = (error.message if error is not None else "").strip()
    message = text.splitlines()[0] if text else ""
    if words and message and not message.lower().startswith(words.split(":")[0].lower()):
        return f"{words}: {message}"
    return message or words or "failed"


def _trial_rows(
    trials: Sequence[TrialRecord],
    attempts: Sequence[AttemptRecord],
    predictions: Mapping[int, Mapping[str, Any]] | None = None,
) -> tuple[TrialRow, ...]:
    by_index: dict[int, list[AttemptRecord]] = defaultdict(list)
    for a in attempts:
        by_index[a.index].append(a)
    rows = []
    for t in trials:
        tried = by_index.get(t.index, [])
        status = t.status
        if status == "pending" and any(a.status == "running" for a in tried):
            status = "running"
        history = " → ".join(f"{a.attempt}: {a.status}" for a in tried)
        prediction = (predictions or {}).get(t.index)
        rows.append(TrialRow(t, status, trial_cause(t.status, t.error), history, prediction))
    return tuple(rows)


def growth_per_worker(attempts: Sequence[Any], workers: Sequence[Any]) -> list[WorkerGrowth]:
    """Growth of each worker's per-trial peaks: Theil-Sen slope with its 95 % interval
    (:func:`trainguard._slope.robust_slope`), over an even sample of :data:`GROWTH_POINTS` trials."""
    from trainguard._slope import robust_slope

    peaks: dict[int, list[int]] = defaultdict(list)
    for a in sorted(attempts, key=lambda a: a.started_at):
        if a.worker_id is not None and a.peak_rss_bytes is not None and a.status in GROWTH_STATUSES:
            peaks[a.worker_id].append(a.peak_rss_bytes)
    out = []
    for w in workers:
        series = peaks.get(w.worker_id, [])
        slope = low = high = None
        if len(series) >= 3:
            x, y = evenly_sampled(series, GROWTH_POINTS)
            est = robust_slope(y, x, confidence=0.95)
            slope = est.slope
            low = est.ci_low if math.isfinite(est.ci_low) else None
            high = est.ci_high if math.isfinite(est.ci_high) else None
        elif len(series) == 2:
            slope = float(series[1] - series[0])
        out.append(
            WorkerGrowth(
                worker=w.worker_id,
                slot=slot_of(w),
                trials=len(series),
                first_peak=series[0] if series else None,
                last_peak=series[-1] if series else None,
                slope=slope,
                low=low,
                high=high,
                end=w.reason_text,
            )
        )
    return out
