"""What the supervisor keeps of each worker's last seconds, and the hooks its loops call: the
flight recorder (samples at full rate, the tree's processes, the last census and allocator stats the
worker sent) and memory pressure (soft limit, predicted crossing, grace).

The session calls these at a few points: every sample (sampler thread), before a kill (sampler
thread), a worker's result or stage message, its death (loop thread). Decisions are the pure
:func:`~trainguard.runner.policy.limit_verdict` (made by the sampler, or next to a remote worker by
its agent) and the functions of :mod:`trainguard.runner.policy._pressure`; the bookkeeping is
:class:`~trainguard.runner.session.soft_limit_and_flight.PressureTracker`; this module only joins them to a
worker's handle.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from typing import Any

from trainguard import process
from trainguard.outcomes import Failure
from trainguard.runner.backends import BaseWorker
from trainguard.runner.policy import Policy, PressureDecision, PressureSince, RecycleDecision
from trainguard.runner.session.soft_limit_and_flight._flight_recorder import FlightRecorder
from trainguard.runner.session.soft_limit_and_flight._pressure_tracker import Action, PressureTracker

__all__ = ["LastSeconds", "tree_processes"]

logger = logging.getLogger(__name__)

#: how often the tree's process list (pid, name, RSS) is refreshed for the flight recorder
_PROCESSES_EVERY_S = 1.0
#: a worker not sampled for this long is gone: its last seconds are dropped
_FORGET_AFTER_S = 60.0

#: a running trial: ``(index, attempt, started_mono)``
Trial = tuple[int, int, float]


def tree_processes(pids: tuple[int, ...]) -> list[dict[str, Any]]:
    """The tree's processes with their RSS, largest first (a process gone meanwhile is left out)."""
    rows: list[dict[str, Any]] = []
    for pid in pids:
        rss = process.statm_rss_bytes(pid)
        if rss is None:
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                name = fh.read().strip()
        except OSError:
            name = "?"
        rows.append({"pid": pid, "name": name, "rss_bytes": rss})
    rows.sort(key=lambda r: -int(r["rss_bytes"]))
    return rows


class _Box:
    """One worker's recorder, its last process list and the last stats it sent."""

    def __init__(self) -> None:
        self.flight = FlightRecorder()
        self.processes: list[dict[str, Any]] = []
        self.processes_at = -1e9
        self.census: Any = None
        self.allocator: dict[str, Any] | None = None
        self.memory_cgroup: tuple[str, str] | None = None
        self.seen_s = 0.0  # monotonic time of its last sample
        self.cgroup_looked = False


class LastSeconds:
    """Per worker id: the flight recorder and the pressure state."""

    def __init__(self, policy: Policy) -> None:
        self.pressure = PressureTracker(policy)
        self._boxes: dict[int, _Box] = {}
        self._lock = threading.Lock()

    def _box(self, worker_id: int) -> _Box:
        with self._lock:
            box = self._boxes.get(worker_id)
            if box is None:
                box = self._boxes[worker_id] = _Box()
            return box

    # -- sampler thread ----------------------------------------------------------------------------

    def on_sample(
        self,
        worker_id: int,
        handle: BaseWorker,
        *,
        rss_bytes: int,
        gpu_bytes: int | None,
        mono_s: float,
        wall_s: float,
    ) -> None:
        """Record one sample in the worker's flight recorder (and, at most once a second, its
        tree's processes)."""
        box = self._box(worker_id)
        box.seen_s = mono_s
        box.flight.add(mono_s, wall_s, rss_bytes, gpu_bytes)
        if not handle.where and mono_s - box.processes_at >= _PROCESSES_EVERY_S:  # local pids only
            box.processes_at = mono_s
            box.processes = tree_processes(handle.pids())
        if not box.cgroup_looked:  # while the worker is alive: its /proc entry names its cgroup
            box.cgroup_looked = True
            box.memory_cgroup = _own_memory_cgroup(handle)

    def rss_series(self, worker_id: int) -> list[tuple[float, int]]:
        """The worker's recent ``(monotonic_s, rss_bytes)`` samples (for its growth rate)."""
        return self._box(worker_id).flight.rss_series()

    def pressure_on(self, worker_id: int, trial: Trial) -> PressureSince | None:
        """The pressure raised on the worker's running trial ``(index, attempt, started_mono)``."""
        return self.pressure.since(worker_id, index=trial[0], attempt=trial[1])

    def raise_pressure(
        self, worker_id: int, handle: BaseWorker, decision: PressureDecision, *, trial: Trial, now_s: float
    ) -> None:
        """A verdict raised pressure on the worker's trial: keep it, and signal the worker."""
        index, attempt, started = trial
        self.pressure.raised(
            worker_id, decision, index=index, attempt=attempt, attempt_started_s=started, now_s=now_s
        )
        self.pressure.delivered(worker_id, handle.signal_pressure())
        logger.info("worker %d under memory pressure: %s", worker_id, decision.message)

    def adopt_pressure(self, worker_id: int, handle: BaseWorker, *, trial: Trial, now_s: float) -> None:
        """Pressure that the verdict next to a remote worker raised (its agent signalled the worker
        there, :meth:`BaseWorker.pressure_raised`): kept here as if raised here, so a checkpoint
        under it moves the trial to a fresh worker and its end is recorded."""
        raised = handle.pressure_raised()
        if raised is None:
            return
        decision, delivered = raised
        index, attempt, started = trial
        self.pressure.raised(
            worker_id,
            decision,
            index=index,
            attempt=attempt,
            attempt_started_s=started,
            now_s=now_s,
            delivered=delivered,
        )
        logger.info("worker %d under memory pressure (on its node): %s", worker_id, decision.message)

    def before_kill(self, worker_id: int, handle: BaseWorker) -> None:
        """The tree's processes as they are at the kill (after it, they are gone)."""
        if handle.where:
            return  # a remote worker's pids are another host's
        try:
            self._box(worker_id).processes = tree_processes(handle.pids())
        except Exception:  # noqa: BLE001 - the kill must happen whatever this reading does
            logger.exception("reading the processes of worker %d before its kill failed", worker_id)

    # -- loop thread --------------------------------------------------------------------------------

    def on_stats(self, worker_id: int, stats: dict[str, Any]) -> None:
        """A result's stats: keep the census and the allocator figures for a later flight record."""
        box = self._box(worker_id)
        if stats.get("census") is not None:
            box.census = stats["census"]
        allocator = {
            k: v for k, v in stats.items() if k in ("torch", "tensorflow", "jax", "allocator", "gpu")
        }
        if allocator:
            box.allocator = allocator

    def flight_record(
        self, worker_id: int, cause: str, *, stats: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The flight recorder of an attempt that ended with ``cause`` (JSON-ready)."""
        if stats:
            self.on_stats(worker_id, stats)
        box = self._box(worker_id)
        exact = _read_peak(box.memory_cgroup) if box.memory_cgroup is not None else None
        gpu_peak = _gpu_accounting_peak(tuple(int(p["pid"]) for p in box.processes))
        if gpu_peak is not None:
            exact = {
                **(exact or {}),
                "gpu_peak_bytes": gpu_peak,
                "gpu_source": "NVML accounting maxMemoryUsage",
            }
        snapshot = (stats or {}).get("torch_memory_snapshot")
        return box.flight.snapshot(
            cause=cause,
            processes=box.processes,
            census=box.census,
            allocator=box.allocator,
            exact_peak=exact,
            torch_memory_snapshot=snapshot if isinstance(snapshot, str) else None,
        )

    def stage_exit(self, worker_id: int, *, remaining: int | None, now_s: float) -> RecycleDecision | None:
        """A checkpoint was committed: leave the worker when its trial is under pressure (unless it
        says no stage is left)."""
        self.pressure.checkpointed(worker_id, now_s)
        state = self.pressure.active(worker_id)
        if state is None or remaining == 0:
            return None
        return RecycleDecision(
            "soft_limit" if state.decision.rule == "soft_limit" else "pressure_predicted",
            {k: v for k, v in state.decision.values.items() if v is not None},
            f"under memory pressure ({state.decision.message})",
        )

    def record_end(
        self, recorder: Any, worker: Any, action: Action, *, rss_bytes: int | None, stage: int | None = None
    ) -> None:
        """Record (loop thread) how a pressure on this worker's trial ended, with the trial's RSS
        then (and its stage, at a checkpoint); nothing when none."""
        event = self.pressure.resolve(
            worker.worker_id, action, now_s=time.monotonic(), rss_bytes=rss_bytes, stage=stage
        )
        if event is not None:
            recorder.event("pressure", event.message, data=event.data, worker=worker, index=event.index)

    def result(
        self,
        recorder: Any,
        worker: Any,
        error: Failure | None,
        status: str,
        stats: dict[str, Any],
        rss_after: int,
    ) -> dict[str, Any] | None:
        """A result's part (loop thread): the stats kept, how a pressure on it ended, and the
        flight recorder of an out-of-memory attempt (a CUDA memory snapshot moved next to the
        store, out of the run's private folder, which goes at the end)."""
        self.on_stats(worker.worker_id, stats)
        failed = error is not None and (error.exc_type or "").endswith("CheckpointError")
        self.record_end(recorder, worker, "checkpoint_failed" if failed else "finished", rss_bytes=rss_after)
        if status != "framework_oom":
            return None
        flight = self.flight_record(worker.worker_id, status, stats=stats)
        snapshot = flight.get("torch_memory_snapshot")
        store_path = recorder.store_path()
        if snapshot and store_path is not None and recorder.run_id is not None:
            kept = store_path.with_name(store_path.name + ".snapshots") / f"run-{recorder.run_id}"
            try:
                kept.mkdir(parents=True, exist_ok=True)
                flight["torch_memory_snapshot"] = shutil.move(snapshot, kept / os.path.basename(snapshot))
            except OSError:
                logger.exception("could not keep the CUDA memory snapshot %s", snapshot)
        return flight

    def prune(self, now_s: float, *, after_s: float = _FORGET_AFTER_S) -> None:
        """Forget workers not sampled for ``after_s`` (gone: recycled, or dead and recorded; the
        loop takes a dead worker's record within moments of its death)."""
        with self._lock:
            gone = [w for w, box in self._boxes.items() if box.seen_s and now_s - box.seen_s > after_s]
        for worker_id in gone:
            self.forget(worker_id)

    def forget(self, worker_id: int) -> None:
        self.pressure.forget(worker_id)
        with self._lock:
            self._boxes.pop(worker_id, None)


def _own_memory_cgroup(handle: BaseWorker) -> tuple[str, str] | None:
    """The worker's own memory cgroup (local workers only: a remote pid names another host's)."""
    from trainguard.probes.cgroup_peak import own_memory_cgroup

    pid = getattr(handle, "pid", None)
    if not isinstance(pid, int) or handle.where or pid == os.getpid():
        return None
    try:
        return own_memory_cgroup(pid)
    except Exception:  # noqa: BLE001 - a missing reading must never cost a sample
        logger.exception("finding the memory cgroup of pid %d failed", pid)
        return None


def _read_peak(found: tuple[str, str]) -> dict[str, Any] | None:
    from trainguard.probes.cgroup_peak import read_peak

    return read_peak(*found)


def _gpu_accounting_peak(pids: tuple[int, ...]) -> int | None:
    """NVML accounting's exact GPU peak of the tree's processes, where accounting is on (GPU only)."""
    from trainguard.probes.nvml import accounting_max_memory, nvml_available

    if not pids or not nvml_available():
        return None
    try:
        return accounting_max_memory(pids)
    except Exception:  # noqa: BLE001 - a missing reading must never cost the record
        logger.exception("reading NVML accounting failed")
        return None
