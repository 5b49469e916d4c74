"""The session's one writer to the store: every attempt, trial, stage, worker, sample and event.

The store has one writer per run (the loop's thread), and this is it: the pool, the recovery and
the stages hand what they decided to the recorder instead of reaching for the store themselves.
With ``store=None`` nothing is kept (a :class:`_NullStore` answers every call with None) and the
run does not resume.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from trainguard.exceptions import DiskFullError, FunctionChangedWarning, SettingsChangedWarning

if TYPE_CHECKING:
    from trainguard.outcomes import Failure
    from trainguard.process.tmpfs import TmpfsFile
    from trainguard.runner.session._records import Attempt, WorkerRecord
    from trainguard.store import RunInfo, Store, TrialRecord

__all__ = ["Recorder"]

logger = logging.getLogger(__name__)


class _NullStore:
    """Stands in for the store when ``store=None``: nothing is kept, nothing resumes."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _SkipWhenFull:
    """The store once its disk filled up and the run is stopping: a write that fails for lack of
    space is skipped and counted (the run's one error line says so), never raised again."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.skipped = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except DiskFullError:
                self.skipped += 1
                logger.debug("store write %s skipped: the disk is full", name)
                return None

        return call


class Recorder:
    """Writes one run's rows; every write is skipped while the run has no id (no store)."""

    def __init__(self, store: Store | None, name: str) -> None:
        self.store: Any = store if store is not None else _NullStore()
        self.persistent = store is not None
        self.name = name
        self.run_id: int | None = None
        self.replaced: str | None = None  # the name an earlier run of this name was archived under
        self._lock_handle: Any = None
        #: whether the run's end was written (False when a full disk refused it)
        self.end_recorded = False
        #: the trials of the run with a stage row: read once, then kept by :meth:`add_stage` (the
        #: session is the run's only writer while it holds the run's lock), so that a dispatch of
        #: a trial that never staged reads nothing
        self._staged: set[int] | None = None

    # -- the run ----------------------------------------------------------------------------------

    def batch(self) -> AbstractContextManager[None]:
        """The writes of one step of the loop (a trial's end) as one transaction of the store
        (:meth:`~trainguard.store.Store.batch`); each write on its own without a store, and once
        the disk filled up (where a write that fails is skipped)."""
        if self.run_id is None or isinstance(self.store, _SkipWhenFull):
            return nullcontext()
        batch: AbstractContextManager[None] = self.store.batch()
        return batch

    def lock(self) -> None:
        """Hold the run's lock for the session (before ``begin``: with a second live supervisor the
        attempts an earlier session left open are running right now)."""
        if self.persistent:
            from trainguard._diskfull import RESERVE_BYTES

            self._lock_handle = self.store.lock_run(self.name, reserve_bytes=RESERVE_BYTES)

    def disk_full(self) -> None:
        """The disk filled up and the run stops: the lock's reserve goes back to the file system so
        that the end can be recorded, and writes that still fail for lack of space are skipped."""
        if self._lock_handle is not None:
            self._lock_handle.free_reserve()
        if self.persistent and not isinstance(self.store, _SkipWhenFull):
            self.store = _SkipWhenFull(self.store)

    def release(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.release()
            self._lock_handle = None

    def replace_stored_run(self) -> None:
        """``fresh=True``: keep the stored run of this name under another name, start anew."""
        old = self.store.get_run(self.name)
        if old is None:
            return
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
        base = f"{self.name[:170]}.replaced-{stamp}"
        archived, n = base, 1
        while self.store.get_run(archived) is not None:
            n += 1
            archived = f"{base}-{n}"
        self.store.rename_run(old.run_id, archived)
        logger.info("run %s: the stored run was renamed %s (fresh=True)", self.name, archived)
        self.replaced = archived

    def stored_run(self) -> RunInfo | None:
        if not self.persistent:
            return None
        info: RunInfo | None = self.store.get_run(self.name)
        return info

    def begin(self, fn_ref: str, params: list[dict[str, Any]], config: dict[str, Any]) -> RunInfo | None:
        info: RunInfo | None = self.store.begin_run(self.name, fn_ref, params, config)
        if info is not None:
            self.run_id = info.run_id
            self._staged = None
        return info

    def trials(self) -> list[TrialRecord]:
        return self.store.trials(self.run_id) if self.run_id is not None else []

    def next_worker_id(self) -> int:
        """One past the highest worker id an earlier session of the run used (0 for a new run)."""
        workers = self.store.workers(self.run_id) if self.run_id is not None else []
        return max(w.worker_id for w in workers) + 1 if workers else 0

    def unfinished(self, params: list[dict[str, Any]]) -> list[tuple[int, Any]]:
        if self.run_id is None:
            return list(enumerate(params))
        return list(self.store.unfinished_trials(self.run_id))

    def finish_run(self, status: str, reason: str | None) -> None:
        if self.run_id is not None:
            skipped = getattr(self.store, "skipped", 0)
            self.store.finish_run(self.run_id, status, reason=reason)
            self.end_recorded = getattr(self.store, "skipped", 0) == skipped

    def store_path(self) -> Any:
        return getattr(self.store, "path", None) if self.persistent else None

    def run_uuid(self) -> str | None:
        """The run's UUID in a persistent store (what binds its checkpoints to it), else None."""
        if self.store_path() is None or self.run_id is None:
            return None
        return str(self.store.run_uuid(self.run_id))

    # -- events -----------------------------------------------------------------------------------

    def event(
        self,
        kind: str,
        message: str,
        *,
        data: dict[str, Any] | None = None,
        worker: WorkerRecord | None = None,
        index: int | None = None,
    ) -> None:
        """Record an event for ``trainguard show`` and the report (a :class:`~trainguard.outcomes.EventKind`)."""
        if self.run_id is None:
            return
        self.store.add_event(
            self.run_id,
            str(kind),
            message,
            data=data,
            worker_id=worker.worker_id if worker is not None else None,
            index=index,
        )

    def kill(self, worker: WorkerRecord, run: Attempt | None, kill: Any) -> None:
        """A worker the watchdog killed (at a limit, or at the run's budget): the event."""
        during = f" (trial {run.index} attempt {run.attempt})" if run is not None else ""
        budget = worker.budget_kill
        self.event(
            "kill" if budget is None else "budget_kill",
            f"worker {worker.worker_id}{during} {kill.message}",
            data={
                "status": kill.status,
                "limit": kill.limit,
                "value": kill.value,
                **(budget.values if budget is not None else {}),
            },
            worker=worker,
            index=run.index if run is not None else None,
        )

    def tmpfs_removed(self, worker: WorkerRecord, run: Attempt, removed: tuple[TmpfsFile, ...]) -> None:
        """The files a trial left in tmpfs, removed at its end (their memory outlives it): said."""
        if not removed:
            return
        from trainguard.units import format_bytes

        total = sum(f.memory_bytes for f in removed)
        names = ", ".join(f.path for f in removed[:5])
        more = f" and {len(removed) - 5} more" if len(removed) > 5 else ""
        message = (
            f"worker {worker.worker_id} (trial {run.index} attempt {run.attempt}) left {len(removed)} "
            f"file(s) holding {format_bytes(total)} in tmpfs: removed {names}{more}"
        )
        logger.info("%s", message)
        self.event(
            "tmpfs_removed",
            message,
            data={"paths": [f.path for f in removed], "bytes": total},
            worker=worker,
            index=run.index,
        )

    def warn_changed(self, reused: int, fn_ref: str) -> None:
        """The stored results were computed by an earlier version of the function: say so, once."""
        short = fn_ref.rpartition(":")[2] or fn_ref
        message = (
            f"run {self.name!r} reuses {reused} stored result{'s' if reused != 1 else ''} computed by an "
            f"earlier version of {short}() (its code changed since the run started): to run every trial "
            "with the current code, pass fresh=True to the Runner (trainguard run --fresh) or another run name"
        )
        self.event("function_changed", message, data={"reused": reused, "fn_ref": fn_ref})
        warnings.warn(FunctionChangedWarning(message), stacklevel=4)

    def warn_settings_changed(self, before: dict[str, Any], after: dict[str, Any], session: int) -> None:
        """A resume with other settings than the last session's: say what changed, once, before
        the first trial (:class:`SettingsChangedWarning`; ``trainguard run`` says it with flags)."""
        from trainguard._settings_change import change_words, setting_changes

        changes = tuple(setting_changes(before, after))
        if not changes:
            return
        message = (
            f"run {self.name!r} resumed as session {session} with other settings: {change_words(changes)} "
            "(the trials that ran before keep theirs: trainguard show lists each session's)"
        )
        warnings.warn(SettingsChangedWarning(message, changes), stacklevel=4)

    def session_start(
        self, *, environment: dict[str, Any] | None, shared: str | None | bool, seeds: dict[int, int] | None
    ) -> None:
        """The events that say how this session runs (a replaced run, the environment, memory
        accounting with shared data: ``shared`` its path, or False when none is in use) and the
        trials' seeds."""
        if self.replaced is not None:
            self.event(
                "run_replaced",
                f"started afresh; the earlier run of this name is kept as {self.replaced}",
                data={"replaced": self.replaced},
            )
        env = environment
        if env is not None:
            self.event(
                "environment",
                f"trainguard {env['trainguard']} on {env['hostname']}: Python {env['python']}, {env['os']}",
                data=env,
            )
        if shared is not False:
            self.event(
                "memory_accounting",
                "shared data is in use: each worker is charged its private memory (USS), so the shared "
                "pages do not count once per worker against the limits",
                data={"metric": "uss", "shared": shared},
            )
        if seeds is not None and self.run_id is not None:
            self.store.set_trial_seeds(self.run_id, seeds)

    # -- attempts, trials, stages -----------------------------------------------------------------

    def start_attempt(self, index: int, attempt: int, worker_id: int) -> None:
        if self.run_id is not None:
            self.store.start_attempt(self.run_id, index, attempt, worker_id)

    def finish_attempt(
        self, run: Attempt, status: str, *, error: Failure | None, peak: int | None, duration_s: float | None
    ) -> None:
        """Record how ``run`` ended: its status, failure, peak RSS (bytes) and duration."""
        if self.run_id is not None:
            self.store.finish_attempt(
                self.run_id,
                run.index,
                run.attempt,
                status=status,
                error=error,
                peak_rss_bytes=peak,
                duration_s=duration_s,
            )

    def attempts(self, index: int) -> list[Any]:
        """The recorded attempts of one trial (none without a store)."""
        return list(self.store.attempts(self.run_id, index)) if self.run_id is not None else []

    def finish_trial(self, index: int, **fields: Any) -> bool | None:
        """Store a trial's outcome; False when an earlier session finished it already."""
        if self.run_id is None:
            return None
        written: bool | None = self.store.finish_trial(self.run_id, index, **fields)
        return written

    def stages(self, index: int) -> list[Any]:
        """One trial's stage history (none without a store, or for a trial that never staged)."""
        if self.run_id is None:
            return []
        if self._staged is None:
            self._staged = {record.index for record in self.store.stages(self.run_id)}
        if index not in self._staged:
            return []
        return list(self.store.stages(self.run_id, index))

    def add_stage(self, index: int, attempt: int, stage: int, **fields: Any) -> None:
        if self.run_id is not None:
            self.store.add_stage(self.run_id, index, attempt, stage, **fields)
            if self._staged is not None:
                self._staged.add(index)

    # -- workers and samples ----------------------------------------------------------------------

    def start_worker(self, worker_id: int, pid: int | None, detail: dict[str, Any]) -> None:
        if self.run_id is not None:
            self.store.start_worker(self.run_id, worker_id, pid, detail)

    def end_worker(self, worker: WorkerRecord, reason: str, detail: dict[str, Any]) -> None:
        """Why a worker ended (a :class:`~trainguard.outcomes.WorkerReason`); said once per worker."""
        if worker.ended:
            return
        worker.ended = True
        if self.run_id is not None:
            self.store.end_worker(self.run_id, worker.worker_id, reason=str(reason), detail=detail)

    def worker_ready(self, worker_id: int, msg: dict[str, Any], preload: tuple[str, ...]) -> None:
        """What a worker said about itself when ready: its device settings, its preload time."""
        if self.run_id is None:
            return
        if msg.get("device") is not None:
            self.store.add_event(
                self.run_id,
                "device",
                f"worker {worker_id} device settings, as its frameworks report them: "
                f"{json.dumps(msg['device'], sort_keys=True)}",
                data=msg["device"],
                worker_id=worker_id,
            )
        if msg.get("preload_s", 0) > 0.05:
            self.store.add_event(
                self.run_id,
                "worker_ready",
                f"worker {worker_id} preloaded {', '.join(preload)} in {msg['preload_s']:.1f} s",
                data={"preload_s": msg["preload_s"], "frameworks": msg.get("frameworks", [])},
                worker_id=worker_id,
            )

    def trial_stats(self, worker_id: int, index: int, message: str, stats: dict[str, Any]) -> None:
        if self.run_id is not None:
            self.store.add_event(
                self.run_id, "trial_stats", message, data=stats, worker_id=worker_id, index=index
            )

    def bytes_in_use(self, worker_id: int, index: int, attempt: int, stats: dict[str, Any]) -> None:
        """The worker's C allocator bytes in use after the attempt, when its stats carry them."""
        value = stats.get("bytes_in_use")
        if self.run_id is None or not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return
        allocator = str(stats.get("allocator") or "unknown")[:32]
        self.store.record_bytes_in_use(self.run_id, index, attempt, worker_id, allocator, value)

    def add_samples(self, batches: dict[int, list[tuple[float, int, int | None, int | None]]]) -> None:
        if self.run_id is None:
            return
        for worker_id, samples in batches.items():
            if samples:
                self.store.add_samples(self.run_id, worker_id, samples)

    # -- remembered sizes (out-of-memory recovery) ------------------------------------------------

    def fitted_size(self, fn_ref: str, params_key: str, device: str, key: str) -> Any:
        return self.store.fitted_size(fn_ref, params_key, device, key)

    def remember_size(self, *args: Any, **kwargs: Any) -> None:
        if self.persistent:
            self.store.remember_size(*args, **kwargs)
