"""The supervisor: starts workers, feeds them trials, samples them from outside, applies the policy
and writes the store (its only writer).

Threads: the caller's thread runs the loop (dispatch, results, deaths, store writes); one sampler
thread reads every worker tree's memory at ``sample_interval_s`` and kills a tree the moment it
crosses a hard limit, or one tree when their sum crosses the run's memory budget (that must not
wait for the loop; the loop records the kill and acts on it). Both share the worker handles under a lock.

A session holds its run's lock for as long as it runs (``Store.lock_run``), keeps its temporary
files in a private folder made for it, treats SIGTERM and SIGHUP like Ctrl-C (when it runs in the
main thread and those signals have their default action), and parses what workers send as data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from multiprocessing.connection import wait as wait_connections
from typing import TYPE_CHECKING, Any, cast

from trainguard import frameworks
from trainguard import process as proctree
from trainguard._outcome import TrialOutcome
from trainguard.exceptions import FAILURE_ERRORS, ConfigError, TrialError, WorkerCrashedError
from trainguard.runner._fnref import FnSpec
from trainguard.runner._protocol import MESSAGE_OVERHEAD_BYTES, MessageReader, ProtocolError
from trainguard.runner.backends.base import BaseBackend, BaseWorker, WorkerSpec
from trainguard.runner.policy import (
    OOM_STATUSES,
    BudgetKill,
    EndCause,
    KillDecision,
    Policy,
    RecycleDecision,
    WorkerHistory,
    check_limits,
    choose_budget_kill,
    decide_budget,
    decide_recycle,
    next_peak_estimate,
    params_without,
    recycle_expected_soon,
    should_prestart,
    should_retry,
    shrink_step,
    start_at,
)
from trainguard.runner.session._pool import PoolPlanner
from trainguard.runner.session._recovery import device_key
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.store import Store, TrialRecord

__all__ = ["TrialResult", "RunProgress", "WorkerProgress", "Session", "default_run_name"]

logger = logging.getLogger(__name__)

#: Times one trial may be killed at the memory budget beside other work and run again without using
#: ``Policy.retries`` (each kill lowers the concurrency, so this is reached only by a trial that grows
#: unlike the ones measured before it); past it, the retry policy decides.
BUDGET_KILLS_PER_TRIAL = 3
#: how many times one trial runs again, in a session, after its worker was lost with its cluster
#: job (a Slurm pilot cancelled, preempted or out of time) before the retry policy decides
LOST_RERUNS_PER_TRIAL = 3


@dataclass(frozen=True, slots=True)
class TrialResult(TrialOutcome):
    """The outcome of one trial.

    ``status`` is ``"ok"`` or ``"failed"``; for a failure ``error`` holds ``status`` (the last attempt's
    cause: ``exception``, ``framework_oom``, ``crashed``, ``os_oom``, ``killed_memory``,
    ``killed_gpu_memory``, ``timeout``, ``not_serializable``), ``message`` and, for an exception,
    ``type`` and ``traceback``. ``attempts`` counts every attempt, earlier sessions' included.
    ``ran_with`` holds the params the last attempt ran with when out-of-memory recovery changed
    them (a smaller batch size), else None.
    ``reused`` is True for a result an earlier session of the same run stored: it was not run again.
    ``seed`` is the seed the trial ran with (``Runner(seed=...)``), the same on every attempt.
    """

    ran_with: dict[str, Any] | None = None
    reused: bool = False
    seed: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: TrialRecord) -> TrialResult:
        """A finished trial an earlier session stored (``reused``: it is not run again)."""
        outcome = {f.name: getattr(rec, f.name) for f in fields(TrialOutcome)}
        return cls(**outcome, reused=True, seed=rec.seed)


@dataclass(frozen=True, slots=True)
class WorkerProgress:
    worker_id: int
    slot: int
    pid: int | None
    state: str
    rss_bytes: int | None
    trials_done: int
    trial_index: int | None
    recycles: int


@dataclass(frozen=True, slots=True)
class RunProgress:
    """A snapshot of a running ``map`` for progress displays (safe to take from any thread)."""

    name: str
    total: int
    done: int
    failed: int
    running: int
    elapsed_s: float
    eta_s: float | None
    workers: tuple[WorkerProgress, ...]
    recycles: int


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _stats_message(index: int, stats: dict[str, Any]) -> str:
    """The words of a trial_stats event: a Node worker's tf.memory() and heap at the trial's end."""
    parts = []
    tf = stats.get("tfjs")
    if isinstance(tf, dict):
        parts.append(f"tf.memory() {tf.get('numTensors')} tensors, {format_bytes(tf.get('numBytes'))}")
    node = stats.get("node")
    if isinstance(node, dict):
        parts.append(
            f"heapUsed {format_bytes(node.get('heapUsed'))}, external {format_bytes(node.get('external'))}"
        )
    return f"trial {index} stats" + (": " + "; ".join(parts) if parts else "")


def default_run_name(fn_ref: str, params: list[dict[str, Any]]) -> str:
    """``"<function>-<hash of fn ref and params>"``: the same call gets the same name, so it resumes."""
    digest = hashlib.sha1(f"{fn_ref}\n{_canonical_json(params)}".encode()).hexdigest()[:10]
    if fn_ref.startswith("cmd:"):
        # a command: named after the script it runs (or the program), e.g. "cmd-train.js"
        import shlex

        try:
            words = shlex.split(fn_ref[4:])
        except ValueError:
            words = fn_ref[4:].split()
        files = [w for w in words[1:] if not w.startswith("-") and "." in os.path.basename(w)]
        short = "cmd-" + os.path.basename(files[0] if files else (words[0] if words else "run"))
    else:
        short = fn_ref.rpartition(":")[2].replace("<", "").replace(">", "") or "run"
    return f"{short}-{digest}"


@dataclass(slots=True)
class _Running:
    index: int
    params: Any
    attempt: int  # the attempt number as stored (continues across sessions)
    session_attempts: int  # attempts made in this session, for the retry budget
    started_mono: float = 0.0
    # out-of-memory recovery: the params this attempt runs with when they differ from ``params``
    attempt_params: dict[str, Any] | None = None
    mixed_precision: bool = False
    oom_attempts: int = 0
    sized: bool = False  # the remembered size was looked up for this trial already
    budget_kills: int = 0  # attempts killed at the memory budget beside other trials, this session

    @property
    def sent_params(self) -> Any:
        return self.attempt_params if self.attempt_params is not None else self.params


@dataclass(slots=True)
class _Worker:
    worker_id: int
    slot: int
    handle: BaseWorker  # the process, wherever the backend runs it
    started_mono: float
    state: str = "starting"  # starting, loading, idle, busy, exiting, dead
    trial: _Running | None = None
    trials_done: int = 0
    rss_after: list[int] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    cur_rss: int | None = None
    trial_peak_rss: int = 0
    trial_peak_gpu: int | None = None
    # staged trials: this worker's stages (RSS after each checkpoint, peak during each stage)
    stages_done: int = 0
    stage_rss_after: list[int] = field(default_factory=list)
    stage_peaks: list[int] = field(default_factory=list)
    stage_peak_rss: int = 0
    stage_exit: RecycleDecision | None = None
    kill: KillDecision | None = None
    fatal: str | None = None
    protocol_error: str | None = None
    ended: bool = False
    # the pool: a replacement started early (framework imported) that waits for a recycle; the
    # threads it was started with and how many workers ran then; what the budget holds for its trial
    spare: bool = False
    threads: int = 0
    concurrency: int = 1
    reserved_bytes: float | None = None
    waited: bool = False
    prestart_said: bool = False
    budget_kill: BudgetKill | None = None  # why the sampler killed it at the memory budget


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Everything a session needs besides the policy and the store; built and validated by Runner."""

    workers: int
    threads: int
    base_env: dict[str, str]
    gpu_slots: tuple[str, ...] | None
    preload: tuple[str, ...]
    sample_interval_s: float
    uss: bool
    census: bool
    cleanup: bool
    start_timeout_s: float
    worker_config: dict[str, Any]
    fresh: bool = False
    max_result_bytes: int = 16 << 20
    tree_tracking: str = "auto"
    seed: int | None = None
    # memory budget of the whole run (None: none); workers="auto"; threads left to measurement
    memory_budget_bytes: int | None = None
    auto_workers: bool = False
    threads_chosen: bool = False
    thread_vars: tuple[str, ...] = ()
    cores: int = 1


_TERMINATING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does, so that the session shuts down
    the same way: run marked interrupted, every worker's tree ended. Only in the main thread, and
    only for signals still at their default action (a handler the program set is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        # one interrupt is enough: the shutdown it starts must not be cut short by a second one
        for sig in installed:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    for sig in _TERMINATING_SIGNALS:
        try:
            if signal.getsignal(sig) is signal.SIG_DFL:
                installed[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            continue
    try:
        yield
    finally:
        for sig, previous in installed.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, previous)


class _NullStore:
    """Stands in for the store when ``store=None``: nothing is kept, nothing resumes."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class Session:
    """One ``map``/``imap`` call: a run of ``fn`` over ``params`` in supervised workers."""

    def __init__(
        self,
        config: SessionConfig,
        policy: Policy,
        store: Store | None,
        fn: FnSpec,
        params: list[dict[str, Any]],
        name: str,
        data: Any = None,
        backend: BaseBackend | None = None,
    ) -> None:
        if backend is None:
            from trainguard.runner.backends.local import LocalBackend

            backend = LocalBackend()
        self.backend = backend
        self.config = config
        self.policy = policy
        self.store = store if store is not None else _NullStore()
        self.persistent = store is not None
        self.fn = fn
        self.params = params
        self.name = name
        self.run_id: int | None = None
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._queue: deque[_Running] = deque()
        self._out: deque[TrialResult] = deque()
        self._samples: dict[int, list[tuple[float, int, int | None, int | None]]] = {}
        self._stop_event = threading.Event()
        self._sampler_thread: threading.Thread | None = None
        self._next_worker_id = 0
        self._recycles_by_slot: dict[int, int] = {}
        self._done = 0
        self._failed = 0
        self._done_this_session = 0
        self._started_mono = time.monotonic()
        self._stop_result: TrialResult | None = None
        self._lost_reruns: dict[int, int] = {}
        self._last_flush = 0.0
        self._nvml: Callable[[], dict[int, int] | None] | None = None
        self._replaced: str | None = None  # the name an earlier run of this name was archived under
        self._closed = False
        # out-of-memory recovery: sizes that fitted in this session, by params without the shrunk keys
        self._fitted: dict[str, int] = {}
        self._device = device_key(
            memory_limit=policy.memory_limit,
            gpu_memory_limit=policy.gpu_memory_limit,
            gpus=config.gpu_slots,
            env=config.base_env,
        )
        self._lock_handle: Any = None
        # shared data (trainguard.share): the run's handle, whether this session owns it (arrays
        # given to map directly), and whether workers are charged private memory (USS) for it
        from trainguard.runner._shared import SharedData, active_shares, share

        self._owns_data = data is not None and not isinstance(data, SharedData)
        self._data = share(data) if self._owns_data else data
        self._private = self._data is not None or bool(active_shares())
        self._checkpoints: Any = None
        self._tmpdir: str | None = None
        self._end_reason: str | None = None
        self._planner = PoolPlanner(
            max_workers=config.workers,
            budget_bytes=config.memory_budget_bytes,
            cores=config.cores,
            threads=None if config.threads_chosen else config.threads,
        )
        # the highest tree sum over the budget seen by the sampler and not recorded yet
        self._budget_over: tuple[int, float] | None = None
        self._budget_over_recorded = 0.0
        self._no_prestart = False  # a replacement started early was killed at the budget

    # -- progress ---------------------------------------------------------------------------------

    def progress(self) -> RunProgress:
        with self._lock:
            workers = tuple(
                WorkerProgress(
                    w.worker_id,
                    w.slot,
                    w.handle.pid,
                    w.state,
                    w.cur_rss,
                    w.trials_done,
                    w.trial.index if w.trial else None,
                    self._recycles_by_slot.get(w.slot, 0),
                )
                for w in self._workers
                if w.state != "dead"
            )
            elapsed = time.monotonic() - self._started_mono
            remaining = len(self.params) - self._done
            eta = None
            if self._done_this_session and remaining:
                eta = elapsed / self._done_this_session * remaining
            elif not remaining:
                eta = 0.0
            return RunProgress(
                self.name,
                len(self.params),
                self._done,
                self._failed,
                sum(1 for w in workers if w.state == "busy"),
                elapsed,
                eta,
                workers,
                sum(self._recycles_by_slot.values()),
            )

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> Iterator[TrialResult]:
        """Yield every trial's result as it finishes (earlier sessions' results first)."""
        status = "interrupted"
        with _signals_as_interrupt():
            try:
                yield from self._begin()
                if self._queue:
                    self.backend.open(
                        slots=self.config.workers,
                        policy=self.policy,
                        sample_interval_s=self.config.sample_interval_s,
                        uss=self.config.uss or self._private,
                    )
                    start = self._planner.initial()
                    if start is not None:
                        self._event("workers", start.message, data=start.values)
                    self._start_sampler()
                while self._queue or self._busy():
                    self._maintain_workers()
                    self._dispatch()
                    self._poll(0.25)
                    self._check_starting()
                    self._flush_samples()
                    while self._out:
                        yield self._out.popleft()
                while self._out:
                    yield self._out.popleft()
                status = "stopped" if self._stop_result is not None else "completed"
            except (ConfigError, WorkerCrashedError) as err:
                # the function did not load, or a worker could not start: keep the reason
                status, self._end_reason = "failed", str(err)
                raise
            finally:
                self._shutdown(status)
        if self._stop_result is not None:
            r = self._stop_result
            error = r.error or {}
            why, status = error.get("message", r.status), error.get("status", r.status)
            # a kill or a crash: the error of that cause, chained (the function itself did not raise)
            cause = FAILURE_ERRORS.get(status)
            raise TrialError(
                f"trial {r.index} failed ({why}) and on_error='stop': "
                f"the run stopped; run it again to resume the trials left",
                index=r.index,
                status=status,
                error=r.error,
            ) from (cause(why, index=r.index, status=status) if cause is not None else None)

    def _replace_stored_run(self) -> None:
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
        self._replaced = archived

    def _begin(self) -> Iterator[TrialResult]:
        if self.persistent:
            # before begin_run, which marks the attempts an earlier session left open interrupted:
            # with a second live supervisor those are running right now
            self._lock_handle = self.store.lock_run(self.name)
        self._tmpdir = tempfile.mkdtemp(prefix="trainguard-run-")  # 0700, a fresh name
        from trainguard.runner._shared import sweep_stale

        sweep_stale()  # shared data left by a supervisor that was killed
        self._replaced = None
        old = None
        if self.persistent:
            if self.config.fresh:
                self._replace_stored_run()
            old = self.store.get_run(self.name)
        # the version that computed the stored results stays with the run until it is run afresh
        stored_version = old.config.get("fn_version") if old is not None else None
        info = self.store.begin_run(
            self.name,
            self.fn.ref,
            self.params,
            {
                "policy": self.policy.to_dict(),
                "workers": self.config.workers,
                **self.config.worker_config,
                "fn_version": stored_version or self.fn.version,
                "seed": self.config.seed,
            },
        )
        attempts_by_index: dict[int, int] = {}
        if info is not None:
            self.run_id = info.run_id
            self._record_session_start(info.run_id)
            records = self.store.trials(info.run_id)
            finished = [rec for rec in records if rec.status in ("ok", "failed")]
            if finished and stored_version and self.fn.version and stored_version != self.fn.version:
                self._warn_changed(len(finished))
            for rec in records:
                attempts_by_index[rec.index] = rec.attempts
                if rec.status in ("ok", "failed"):
                    self._done += 1
                    self._failed += rec.status == "failed"
                    yield TrialResult.from_record(rec)
            workers = self.store.workers(info.run_id)
            if workers:
                self._next_worker_id = max(w.worker_id for w in workers) + 1
            pending = self.store.unfinished_trials(info.run_id)
        else:
            pending = list(enumerate(self.params))
        for index, params in pending:
            self._queue.append(_Running(index, params, attempts_by_index.get(index, 0) + 1, 1))
        from trainguard.runner.session._stages import CheckpointFolders

        store_path = getattr(self.store, "path", None) if self.persistent else None
        self._checkpoints = CheckpointFolders(store_path, self.run_id)

    def _record_session_start(self, run_id: int) -> None:
        """The events that say how this session runs (a replaced run, the environment, memory
        accounting with shared data) and the trials' seeds."""
        if self._replaced is not None:
            self._event(
                "run_replaced",
                f"started afresh; the earlier run of this name is kept as {self._replaced}",
                data={"replaced": self._replaced},
            )
        self._record_environment()
        if self._private:
            self._event(
                "memory_accounting",
                "shared data is in use: each worker is charged its private memory (USS), so the shared "
                "pages do not count once per worker against the limits",
                data={"metric": "uss", "shared": self._data.path if self._data is not None else None},
            )
        if self.config.seed is not None:
            from trainguard.runner.worker.seeding import derive_seed

            seed = self.config.seed
            self.store.set_trial_seeds(run_id, {i: derive_seed(seed, i) for i in range(len(self.params))})

    def _seed_of(self, index: int) -> int | None:
        if self.config.seed is None:
            return None
        from trainguard.runner.worker.seeding import derive_seed

        return derive_seed(self.config.seed, index)

    def _warn_changed(self, reused: int) -> None:
        import warnings

        from trainguard.exceptions import FunctionChangedWarning

        short = self.fn.ref.rpartition(":")[2] or self.fn.ref
        message = (
            f"run {self.name!r} reuses {reused} stored result{'s' if reused != 1 else ''} computed by an "
            f"earlier version of {short}() (its code changed since the run started): to run every trial "
            "with the current code, pass fresh=True to the Runner (trainguard run --fresh) or another run name"
        )
        self._event("function_changed", message, data={"reused": reused, "fn_ref": self.fn.ref})
        warnings.warn(FunctionChangedWarning(message), stacklevel=4)

    def _record_environment(self) -> None:
        """Store where this session runs (doctor's summary, host name) for reports; ~15 ms, no framework."""
        import platform

        from trainguard import __version__
        from trainguard.doctor import diagnose

        try:
            env = diagnose().to_dict()
        except Exception:  # noqa: BLE001 - a report's context must never stop a run
            logger.debug("could not read the environment for the store", exc_info=True)
            return
        env["hostname"] = platform.node()
        env["trainguard"] = __version__
        self._event(
            "environment",
            f"trainguard {__version__} on {env['hostname']}: Python {env['python']}, {env['os']}",
            data=env,
        )

    def _busy(self) -> bool:
        return any(w.state == "busy" for w in self._workers)

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers if w.state not in ("dead", "exiting")]

    def _maintain_workers(self) -> None:
        if self._stop_result is not None:
            return
        needed = min(
            self._planner.target, len(self._queue) + sum(1 for w in self._workers if w.state == "busy")
        )
        live = [w for w in self._live() if not w.spare]
        used_slots = {w.slot for w in self._live()}
        while len(live) < needed:
            spare = next((w for w in self._live() if w.spare), None)
            if spare is not None:
                with self._lock:
                    spare.spare = False
                    if self.config.gpu_slots is None:  # its slot label: the lowest free one
                        spare.slot = next(
                            s for s in range(len(self._workers) + 1) if s not in used_slots - {spare.slot}
                        )
                live.append(spare)
                used_slots.add(spare.slot)
                continue
            if self._planner.budgeted and live:
                fresh = self._planner.fresh_peak_bytes
                if fresh is None or self._reserved() + fresh > (self._planner.budget_bytes or 0):
                    break  # no room for another fresh worker's trial now
            slot = next(s for s in range(len(self._workers) + self.config.workers + 1) if s not in used_slots)
            worker = self._start_worker(slot)
            live.append(worker)
            used_slots.add(slot)

    def _reserved(self, exclude: _Worker | None = None) -> float:
        """What the live workers hold or are expected to reach, against the memory budget: the
        predicted peak of a running trial (or more, as sampled), the RSS of an idle worker, and the
        measured peak of a fresh worker's trial for a worker not ready yet."""
        total = 0.0
        fresh = float(self._planner.fresh_peak_bytes or 0)
        with self._lock:
            workers = [w for w in self._workers if w.state != "dead" and w is not exclude]
            for w in workers:
                current = float(w.cur_rss or 0)
                if w.state == "busy":
                    total += max(w.reserved_bytes or 0.0, current, float(w.trial_peak_rss))
                elif w.spare:
                    total += max(current, float(self._planner.spare_bytes or 0) if w.state != "idle" else 0.0)
                elif w.trials_done == 0:
                    total += max(current, fresh)
                else:
                    total += current
        return total

    def _budget_check(self, worker: _Worker) -> bool:
        """Under a memory budget, whether ``worker`` may start its next trial now; it may be
        recycled, retired or kept waiting instead (each recorded with its reason)."""
        if not self._planner.budgeted:
            return True
        history = WorkerHistory(worker.trials_done, tuple(worker.rss_after), tuple(worker.peaks))
        predicted = next_peak_estimate(self.policy, history)
        others = self._reserved(exclude=worker)
        others_busy = any(w.state == "busy" for w in self._workers if w is not worker)
        decision = decide_budget(
            self._planner.budget_bytes or 0,
            predicted_peak_bytes=predicted,
            others_reserved_bytes=others,
            fresh_peak_bytes=self._planner.fresh_peak_bytes,
            others_busy=others_busy,
        )
        if decision.action == "run":
            worker.reserved_bytes = decision.values["predicted_peak_bytes"]
            worker.waited = False
            return True
        if decision.action == "wait":
            if not worker.waited:
                worker.waited = True
                self._event(
                    "budget_wait",
                    f"worker {worker.worker_id} waits: {decision.message}",
                    data=decision.values,
                    worker=worker,
                )
            return False
        if decision.action == "over_budget":
            self._event("budget_too_small", decision.message, data=decision.values, worker=worker)
            raise ConfigError(decision.message)
        rule = "budget" if decision.action == "recycle" else "budget_fewer_workers"
        self._retire(worker, RecycleDecision(rule, decision.values, decision.message))
        return False

    def _start_worker(self, slot: int, *, preload: tuple[str, ...] = (), spare: bool = False) -> _Worker:
        env = dict(self.config.base_env)
        concurrency = self._planner.target
        threads = self._planner.threads.for_new_worker(concurrency, [w.threads for w in self._live()])
        for var in self.config.thread_vars:
            env[var] = str(threads)
        preload = tuple(dict.fromkeys((*self.config.preload, *preload)))
        if self.config.gpu_slots is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.config.gpu_slots[slot % len(self.config.gpu_slots)]
        spec = WorkerSpec(
            worker_id=self._next_worker_id,
            slot=slot,
            env=env,
            bootstrap={
                "sys_path": [p for p in sys.path if p],
                "preload": list(preload),
                "threads": threads,
                "quiet_modules": list(frameworks.QUIET_MODULES),
                "max_result_bytes": self.config.max_result_bytes,
                "device": self.config.worker_config.get("device"),
                "tf_custom_gradients": self.config.worker_config.get("tf_custom_gradients", True),
            },
            fn_kind="node" if self.fn.kind == "node" else "python",
            max_message_bytes=self.config.max_result_bytes + MESSAGE_OVERHEAD_BYTES,
            tree_tracking=self.config.tree_tracking,
            capture_dir=self._tmpdir,
            detail={"CUDA_VISIBLE_DEVICES": env["CUDA_VISIBLE_DEVICES"]} if self.config.gpu_slots else {},
        )
        handle = self.backend.start(spec)
        worker = _Worker(
            worker_id=spec.worker_id,
            slot=slot,
            handle=handle,
            started_mono=time.monotonic(),
            spare=spare,
            threads=threads,
            concurrency=concurrency,
        )
        self._next_worker_id += 1
        with self._lock:
            self._workers.append(worker)
        if self.run_id is not None:
            self.store.start_worker(
                self.run_id,
                worker.worker_id,
                handle.pid,
                {
                    "slot": slot,
                    "tree_tracking": handle.tracking,
                    **handle.where,
                    **spec.detail,
                    "threads": threads,
                    "workers_at_start": concurrency,
                    **({"spare": True, "preload": list(preload)} if spare else {}),
                },
            )
        logger.debug("started worker %d (pid %d) in slot %d", worker.worker_id, handle.pid, slot)
        return worker

    def _dispatch(self) -> None:
        for worker in list(self._workers):
            if not self._queue or self._stop_result is not None:
                return
            if worker.state != "idle" or worker.spare:
                continue
            if not self._budget_check(worker):
                continue
            with self._lock:
                if worker.kill is not None:  # killed at the budget while idle: its death is coming
                    continue
            run = self._queue.popleft()
            self._apply_fitted_size(run)
            run.started_mono = time.monotonic()
            with self._lock:
                if worker.kill is not None:  # killed in between: the trial waits for another worker
                    self._queue.appendleft(run)
                    continue
                worker.trial = run
                worker.state = "busy"
                worker.trial_peak_rss = worker.cur_rss or 0
                worker.trial_peak_gpu = None
                worker.kill = None
            if self.run_id is not None:
                self.store.start_attempt(self.run_id, run.index, run.attempt, worker.worker_id)
            staged = self._stage_message(worker, run)
            try:
                self._send(
                    worker,
                    {
                        "op": "trial",
                        "index": run.index,
                        "attempt": run.attempt,
                        "key": 0,
                        "params": run.sent_params,
                        "mixed_precision": run.mixed_precision,
                        "seed": self._seed_of(run.index),
                        **staged,
                        "cleanup": self.config.cleanup,
                        "census": self.config.census,
                    },
                )
            except OSError:
                pass  # it died; the EOF on its pipe reports the death with this trial attached

    def _stage_message(self, worker: _Worker, run: _Running) -> dict[str, Any]:
        """The shared data and checkpoint folder a trial message carries; a staged trial's resume
        (or its start over when its checkpoint was deleted) is recorded here."""
        from trainguard.runner.session._stages import data_message, prepare_resume

        out: dict[str, Any] = {"data": data_message(self._data)}
        if self.fn.kind in ("command", "node") or self._checkpoints is None:
            return out
        out["checkpoint_dir"] = self._checkpoints.trial_dir(run.index)
        recorded = None
        if self.run_id is not None:
            for stage in self.store.stages(self.run_id, run.index):
                recorded = (
                    stage.stage
                    if stage.event == "checkpoint"
                    else None
                    if stage.event == "restart"
                    else recorded
                )
        resume, reason = prepare_resume(self._checkpoints, run.index, recorded)
        if self.run_id is None:
            return out
        if resume is not None:
            self.store.add_stage(
                self.run_id, run.index, run.attempt, resume, event="resume", worker_id=worker.worker_id
            )
        elif reason is not None:
            out["restart_reason"] = reason
            self.store.add_stage(
                self.run_id,
                run.index,
                run.attempt,
                0,
                event="restart",
                worker_id=worker.worker_id,
                note=reason,
            )
            self._event(
                "stage_restart",
                f"trial {run.index} starts over on worker {worker.worker_id}: {reason}",
                data={"reason": reason},
                worker=worker,
                index=run.index,
            )
        return out

    def _on_stage(self, worker: _Worker, msg: dict[str, Any]) -> None:
        """A staged trial committed a checkpoint: record it, and say whether the worker goes on."""
        from trainguard.runner.policy import decide_stage

        run = worker.trial
        go_on = True
        if run is not None and run.index == msg["index"]:
            reading = self._read_tree(worker, rediscover=True)
            rss = reading[0] if reading else int(msg["rss_bytes"])
            with self._lock:
                peak = max(worker.stage_peak_rss, rss)
                worker.stage_peak_rss = rss
                worker.stages_done += 1
                worker.stage_rss_after.append(rss)
                worker.stage_peaks.append(peak)
            if self.run_id is not None:
                self.store.add_stage(
                    self.run_id,
                    run.index,
                    run.attempt,
                    int(msg["stage"]),
                    event="checkpoint",
                    worker_id=worker.worker_id,
                    rss_bytes=rss,
                    peak_rss_bytes=peak,
                )
            decision = decide_stage(
                self.policy,
                WorkerHistory(
                    worker.stages_done,
                    tuple(worker.stage_rss_after),
                    tuple(worker.stage_peaks),
                    self._supervisor_rss(),
                ),
            )
            ending = getattr(worker.handle, "ending", None)
            if decision is None and ending and msg.get("remaining") != 0:
                decision = RecycleDecision("job_ending", {}, f"its cluster job is about to end ({ending})")
            if decision is not None and msg.get("remaining") == 0:
                decision = None  # the trial ends after this stage: leaving now would only cost a start
            if decision is not None:
                go_on = False
                worker.stage_exit = decision
                self._event(
                    "stage_exit",
                    f"trial {run.index} leaves worker {worker.worker_id} at its checkpoint of stage {msg['stage']} "
                    f"and resumes in a fresh worker: {decision.message}",
                    data={"rule": decision.rule, "stage": msg["stage"], **decision.values},
                    worker=worker,
                    index=run.index,
                )
        try:
            self._send(worker, {"op": "stage_reply", "go_on": go_on})
        except OSError:
            pass  # it died; the EOF on its pipe reports the death

    def _on_staged(self, worker: _Worker, run: _Running, msg: dict[str, Any]) -> None:
        """The worker left at a checkpoint: the trial goes on, from there, in a fresh worker."""
        with self._lock:
            worker.trial = None
            worker.state = "idle"
            peak = max(worker.trial_peak_rss, worker.stage_peak_rss)
        if self.run_id is not None:
            self.store.finish_attempt(
                self.run_id,
                run.index,
                run.attempt,
                status="staged",
                error=None,
                peak_rss_bytes=peak or None,
                duration_s=float(msg["duration_s"]),
            )
        self._queue.appendleft(
            _Running(
                run.index,
                run.params,
                run.attempt + 1,
                run.session_attempts,  # leaving at a checkpoint is no failure: no retry used
                attempt_params=run.attempt_params,
                mixed_precision=run.mixed_precision,
                oom_attempts=run.oom_attempts,
                sized=True,
            )
        )
        decision = worker.stage_exit or RecycleDecision("stage_exit", {}, "left at a checkpoint")
        self._retire(worker, decision)

    def _send(self, worker: _Worker, msg: dict[str, Any]) -> None:
        worker.handle.send(msg)

    def _poll(self, timeout: float) -> None:
        conns = {w.handle.inbox: w for w in self._workers if w.state != "dead"}
        if not conns:
            time.sleep(min(timeout, 0.05))
            return
        # wait() needs only fileno(), which MessageReader has, and returns the objects it was given
        readers: list[Any] = list(conns)
        ready = cast("list[MessageReader]", wait_connections(readers, timeout=timeout))
        for conn in ready:
            worker = conns[conn]
            if worker.state == "dead":
                continue
            try:
                messages = conn.read()
            except EOFError:
                self._on_death(worker)
                continue
            except ProtocolError as err:
                self._on_protocol_error(worker, str(err))
                continue
            for msg in messages:
                if worker.state == "dead":
                    break
                self._on_message(worker, msg)

    def _on_protocol_error(self, worker: _Worker, cause: str) -> None:
        """A worker sent bytes that are not a message (its trial wrote onto the channel): end that
        worker and fail its trial with the cause; the run goes on with a fresh worker."""
        with self._lock:
            worker.protocol_error = (
                f"worker {worker.worker_id} sent {cause}: something in the trial wrote onto trainguard's "
                "message channel, so the worker was ended"
            )
        logger.warning("worker %d: protocol error: %s", worker.worker_id, cause)
        worker.handle.kill()
        self._on_death(worker)

    def _check_starting(self) -> None:
        now = time.monotonic()
        for worker in self._workers:
            if (
                worker.state in ("starting", "loading")
                and now - worker.started_mono > self.config.start_timeout_s
            ):
                worker.handle.kill()
                self._event(
                    "kill",
                    f"worker {worker.worker_id} killed: not ready after {self.config.start_timeout_s:g} s "
                    f"({worker.state})",
                    data={"start_timeout_s": self.config.start_timeout_s, "state": worker.state},
                    worker=worker,
                )
                raise WorkerCrashedError(
                    f"worker {worker.worker_id} was not ready after {self.config.start_timeout_s:g} s "
                    "(preload or fn import too slow or stuck): raise start_timeout or check the import",
                    pid=worker.handle.pid,
                )

    # -- messages ---------------------------------------------------------------------------------

    def _on_message(self, worker: _Worker, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "ready":
            worker.handle.on_ready(msg)
            try:
                self._send(worker, {"op": "fn", "key": 0, "kind": self.fn.kind, "payload": self.fn.payload})
            except OSError:
                return  # it died after saying ready; the EOF on its pipe reports the death
            with self._lock:
                worker.state = "loading"
            if self.run_id is not None and msg.get("device") is not None:
                self.store.add_event(
                    self.run_id,
                    "device",
                    f"worker {worker.worker_id} device settings, as its frameworks report them: "
                    f"{json.dumps(msg['device'], sort_keys=True)}",
                    data=msg["device"],
                    worker_id=worker.worker_id,
                )
            if self.run_id is not None and msg.get("preload_s", 0) > 0.05:
                self.store.add_event(
                    self.run_id,
                    "worker_ready",
                    f"worker {worker.worker_id} preloaded {', '.join(self.config.preload)} in {msg['preload_s']:.1f} s",
                    data={"preload_s": msg["preload_s"], "frameworks": msg.get("frameworks", [])},
                    worker_id=worker.worker_id,
                )
        elif op == "stage":
            self._on_stage(worker, msg)
        elif op == "fn_ok":
            with self._lock:
                worker.state = "idle"
            if worker.spare:
                self._planner.spare_ready(worker.cur_rss)
        elif op == "fn_error":
            if msg.get("nested"):
                raise ConfigError(msg["nested"], traceback=msg.get("traceback"))
            raise ConfigError(
                f"fn {self.fn.ref} cannot be loaded in the worker: {msg['message']}",
                traceback=msg.get("traceback"),
            )
        elif op == "fatal":
            raise ConfigError(f"worker {worker.worker_id} could not start: {msg['message']}")
        elif op == "result":
            self._on_result(worker, msg)

    def _supervisor_rss(self) -> int:
        """This process's own RSS, when the policy's budget counts it (0 otherwise: not read)."""
        if not self.policy.budget_counts_supervisor:
            return 0
        return proctree.statm_rss_bytes(os.getpid()) or 0  # None (unreadable): the worker alone

    def _on_result(self, worker: _Worker, msg: dict[str, Any]) -> None:
        run = worker.trial
        if run is None or run.index != msg["index"]:
            return
        if msg["status"] == "staged":
            self._on_staged(worker, run, msg)
            return
        reading = self._read_tree(worker, rediscover=True)
        own_rss = int(msg.get("rss_bytes") or 0)
        rss_after = reading[0] if reading else own_rss
        children = max(0, rss_after - own_rss)
        # the worker's own high-water mark counts shared data's pages: not used when it is charged
        # private memory only
        hwm = 0 if self._private else (msg.get("hwm_bytes") or 0) + children
        with self._lock:
            worker.trial = None
            worker.state = "idle"
            worker.cur_rss = rss_after
            peak = max(worker.trial_peak_rss, rss_after, hwm)
            worker.trials_done += 1
            worker.rss_after.append(rss_after)
            worker.peaks.append(peak)
        status = msg["status"]
        try:
            value = json.loads(msg["value_json"]) if status == "ok" else None
        except (TypeError, ValueError) as err:
            status, value = "protocol_error", None
            msg = {
                **msg,
                "error": {"status": status, "message": f"the worker sent a result that is not JSON: {err}"},
            }
        stats = msg.get("stats") or {}
        if self.run_id is not None and (
            "census" in stats
            or stats.get("cleanup_s")
            or "tfjs" in stats
            or "node" in stats
            or "fragmentation" in stats
        ):
            self.store.add_event(
                self.run_id,
                "trial_stats",
                _stats_message(run.index, stats),
                data=stats,
                worker_id=worker.worker_id,
                index=run.index,
            )
        self._finish_attempt(worker, run, status, msg.get("error"), value, peak, float(msg["duration_s"]))
        worker.reserved_bytes = None
        self._plan_after_trial(worker, peak, rss_after, float(msg["duration_s"]), status, stats)
        if status == "framework_oom":
            # what the failed allocation held, and the fragmentation it left, stay in this process
            # (empty_cache() does not give it back): never run another trial in it
            self._retire(
                worker,
                RecycleDecision(
                    "out_of_memory",
                    {"index": run.index, "attempt": run.attempt},
                    f"trial {run.index} ran out of memory in it: a worker is never reused after an OOM",
                ),
            )
            return
        if self._queue and self._stop_result is None:
            decision = decide_recycle(
                self.policy,
                WorkerHistory(
                    worker.trials_done, tuple(worker.rss_after), tuple(worker.peaks), self._supervisor_rss()
                ),
            )
            if decision is not None:
                self._retire(worker, decision)
            else:
                self._maybe_prestart(worker, stats)

    def _plan_after_trial(
        self,
        worker: _Worker,
        peak: int,
        rss_after: int,
        duration_s: float,
        status: str,
        stats: dict[str, Any],
    ) -> None:
        """Feed one trial to the pool's planner: a fresh worker's first peak sizes the pool under a
        budget; timed trials choose threads per worker. Changes are recorded with their reasons."""
        if status != "ok":
            return
        if worker.trials_done == 1:
            change = self._planner.first_trial_done(peak, rss_after)
            if change is not None:
                self._event("workers", change.message, data=change.values, worker=worker)
            return
        choice = self._planner.threads.observe(worker.concurrency, worker.threads, duration_s)
        if choice is not None:
            self._event("threads", choice.message, data=choice.values, worker=worker)

    def _maybe_prestart(self, worker: _Worker, stats: dict[str, Any]) -> None:
        """Under a budget with room, start the replacement of a worker expected to be recycled
        soon, importing the frameworks its trials use, so the recycle costs no import."""
        if (
            not self._planner.budgeted
            or self._no_prestart
            or not self._queue
            or any(w.spare for w in self._live())
        ):
            return
        if self.backend.name != "local":
            return  # a spare is a worker beyond the slots a remote backend was opened with
        history = WorkerHistory(
            worker.trials_done, tuple(worker.rss_after), tuple(worker.peaks), self._supervisor_rss()
        )
        if not recycle_expected_soon(self.policy, history):
            return
        decision = should_prestart(
            self._planner.budget_bytes or 0,
            reserved_bytes=self._reserved(),
            spare_bytes=self._planner.spare_bytes,
            recycle_expected=True,
        )
        if decision is None:
            return
        if decision.action == "no_room":
            if not worker.prestart_said:  # said once per worker
                worker.prestart_said = True
                self._event(
                    "prestart",
                    f"worker {worker.worker_id}: {decision.message}",
                    data=decision.values,
                    worker=worker,
                )
            return
        frameworks = tuple(f for f in stats.get("frameworks") or () if isinstance(f, str))
        spare = self._start_worker(worker.slot + self.config.workers, preload=frameworks, spare=True)
        self._event(
            "prestart",
            f"worker {spare.worker_id} started early to replace worker {worker.worker_id}: {decision.message}",
            data={**decision.values, "preload": list(frameworks), "replaces": worker.worker_id},
            worker=spare,
        )

    def _finish_attempt(
        self,
        worker: _Worker | None,
        run: _Running,
        status: str,
        error: dict[str, Any] | None,
        value: Any,
        peak: int | None,
        duration_s: float | None,
    ) -> None:
        worker_id = worker.worker_id if worker else None
        rule = self.policy.on_oom
        if error is not None:
            error = {**error, "attempt": run.attempt, "worker_id": worker_id}
            if rule is not None and status in OOM_STATUSES:
                error["ran_with"] = self._sized_keys(run.sent_params)
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
        if rule is not None and status in OOM_STATUSES and self._shrink(worker, run, status, error, peak):
            return
        if status == "ok" and rule is not None and run.attempt_params is not None:
            self._remember(run, peak)
        if status != "ok" and should_retry(self.policy, status, run.session_attempts):
            logger.info("trial %d attempt %d: %s; retrying", run.index, run.attempt, status)
            cause = str((error or {}).get("message") or status)
            where = f" on worker {worker_id}" if worker_id is not None else ""
            self._event(
                "retry",
                f"trial {run.index} attempt {run.attempt}{where} ended with {status} ({cause}); "
                f"retrying as attempt {run.attempt + 1}",
                data={"status": status, "message": cause, "attempt": run.attempt},
                worker=worker,
                index=run.index,
            )
            self._queue.appendleft(_Running(run.index, run.params, run.attempt + 1, run.session_attempts + 1))
            return
        final = "ok" if status == "ok" else "failed"
        if self.run_id is not None:
            written = self.store.finish_trial(
                self.run_id,
                run.index,
                status=final,
                value=value,
                error=error,
                attempts=run.attempt,
                peak_rss_bytes=peak,
                worker_id=worker_id,
                duration_s=duration_s,
            )
            if written is False:  # already finished by an earlier session: never report it twice
                return
        if self._checkpoints is not None:
            self._checkpoints.remove_trial(run.index)
        result = TrialResult(
            run.index,
            run.params,
            final,
            value,
            error,
            run.attempt,
            peak,
            worker_id,
            duration_s,
            run.attempt_params,
            seed=self._seed_of(run.index),
        )
        with self._lock:
            self._done += 1
            self._done_this_session += 1
            self._failed += final == "failed"
        self._out.append(result)
        if final == "failed" and self.policy.on_error == "stop" and self._stop_result is None:
            self._stop_result = result
            self._queue.clear()

    # -- out-of-memory recovery -------------------------------------------------------------------

    def _sized_keys(self, params: Any) -> dict[str, Any]:
        rule = self.policy.on_oom
        assert rule is not None
        keys = [rule.key] + ([rule.accumulate] if rule.accumulate else [])
        return {k: params.get(k, 1 if k == rule.accumulate else None) for k in keys}

    def _fitted_key(self, params: dict[str, Any]) -> str:
        rule = self.policy.on_oom
        assert rule is not None
        return params_without(params, [rule.key, rule.accumulate])

    def _apply_fitted_size(self, run: _Running) -> None:
        """Start a trial at the size remembered for its params (this session's, else the store's)
        when that is below the size it asks for."""
        rule = self.policy.on_oom
        if rule is None or run.sized or run.attempt_params is not None:
            return
        run.sized = True
        params_key = self._fitted_key(run.params)
        size = self._fitted.get(params_key)
        source = "this run"
        if size is None and rule.remember:
            try:
                record = self.store.fitted_size(self.fn.ref, params_key, self._device, rule.key)
            except Exception:  # noqa: BLE001 - a missing memory only costs an OOM attempt
                logger.exception("could not read the remembered size")
                record = None
            if record is not None:
                size, source = record.size, f"the store ({record.source})"
                self._fitted[params_key] = size
        asked = int(run.params[rule.key])
        if size is None or size >= asked:
            return
        run.attempt_params = start_at(rule, run.params, size)
        size = int(run.attempt_params[rule.key])
        sized = self._sized_keys(run.attempt_params)
        words = ", ".join(f"{k}={v}" for k, v in sized.items())
        self._event(
            "oom_start",
            f"trial {run.index} starts at {words} (asked {rule.key}={asked}): the size remembered from {source}",
            data={"asked": asked, "size": size, "ran_with": sized, "source": source},
            index=run.index,
        )

    def _shrink(
        self,
        worker: _Worker | None,
        run: _Running,
        status: str,
        error: dict[str, Any] | None,
        peak: int | None,
    ) -> bool:
        """Queue the next, smaller attempt of an out-of-memory trial; False when there is none."""
        rule = self.policy.on_oom
        assert rule is not None
        current = run.sent_params
        step = None
        if run.oom_attempts + 1 < rule.max_attempts:
            step = shrink_step(rule, current, mixed_precision_on=run.mixed_precision)
        cause = str((error or {}).get("message") or status)
        sized = self._sized_keys(current)
        words = ", ".join(f"{k}={v}" for k, v in sized.items())
        where = f" on worker {worker.worker_id}" if worker is not None else ""
        peak_words = f" at peak {format_bytes(peak)}" if peak else ""
        if step is None:
            why = (
                f"{rule.key}={current[rule.key]} is the minimum"
                if int(current[rule.key]) <= rule.minimum
                else f"max_attempts={rule.max_attempts} out-of-memory attempts reached"
            )
            if error is not None:
                error["message"] = f"{error.get('message') or status} (out of memory at {words}; {why})"
            self._event(
                "oom_give_up",
                f"trial {run.index} attempt {run.attempt}{where} ran out of memory ({status}) with {words}"
                f"{peak_words}: {why}, no smaller size to try",
                data={"status": status, "ran_with": sized, "peak_bytes": peak, "attempt": run.attempt},
                worker=worker,
                index=run.index,
            )
            return False
        nxt = self._sized_keys(step.params)
        self._event(
            "oom_shrink",
            f"trial {run.index} attempt {run.attempt}{where} ran out of memory ({status}: {cause}) with {words}"
            f"{peak_words}; {step.message}",
            data={
                "status": status,
                "attempt": run.attempt,
                "ran_with": sized,
                "peak_bytes": peak,
                "next": nxt,
                "effective_batch": step.effective_batch,
                "previous_effective_batch": step.previous_effective_batch,
                "mixed_precision": step.mixed_precision,
            },
            worker=worker,
            index=run.index,
        )
        logger.info("trial %d attempt %d: %s; %s", run.index, run.attempt, status, step.message)
        self._queue.appendleft(
            _Running(
                run.index,
                run.params,
                run.attempt + 1,
                run.session_attempts,  # an OOM shrink does not use the retries budget
                attempt_params=step.params,
                mixed_precision=step.mixed_precision,
                oom_attempts=run.oom_attempts + 1,
                sized=True,
            )
        )
        return True

    def _remember(self, run: _Running, peak: int | None) -> None:
        rule = self.policy.on_oom
        assert rule is not None and run.attempt_params is not None
        size = int(run.attempt_params[rule.key])
        params_key = self._fitted_key(run.params)
        if self._fitted.get(params_key) == size:
            return
        self._fitted[params_key] = size
        sized = self._sized_keys(run.attempt_params)
        if rule.remember and self.persistent:
            self.store.remember_size(
                self.fn.ref,
                params_key,
                self._device,
                rule.key,
                size,
                peak_rss_bytes=peak,
                source="shrink",
                detail={
                    "asked": run.params[rule.key],
                    "ran_with": sized,
                    "run": self.name,
                    "index": run.index,
                },
            )
        words = ", ".join(f"{k}={v}" for k, v in sized.items())
        self._event(
            "oom_fitted",
            f"trial {run.index} fitted at {words} (asked {rule.key}={run.params[rule.key]}"
            f"{', peak ' + format_bytes(peak) if peak else ''}); later trials and runs start there",
            data={
                "ran_with": sized,
                "asked": run.params[rule.key],
                "peak_bytes": peak,
                "device": self._device,
            },
            index=run.index,
        )

    def _retire(self, worker: _Worker, decision: RecycleDecision) -> None:
        with self._lock:
            worker.state = "exiting"
            self._recycles_by_slot[worker.slot] = self._recycles_by_slot.get(worker.slot, 0) + 1
        try:
            self._send(worker, {"op": "exit"})
        except OSError:
            pass
        self._end_worker(
            worker,
            "recycled",
            {"rule": decision.rule, "why": decision.message, "trials": worker.trials_done, **decision.values},
        )
        logger.info("worker %d recycled: %s", worker.worker_id, decision.message)
        self._event(
            "recycle",
            f"worker {worker.worker_id} recycled after {worker.trials_done} "
            f"trial{'s' if worker.trials_done != 1 else ''}: {decision.message}",
            data={"rule": decision.rule, "trials": worker.trials_done, **decision.values},
            worker=worker,
        )
        # wait for it to be gone before a replacement starts: its memory must be free first
        self._reap(worker, grace_s=10.0)

    def _reap(self, worker: _Worker, grace_s: float) -> int | None:
        rc, killed = worker.handle.end(grace_s)
        if killed:
            try:
                self._event(
                    "kill",
                    f"worker {worker.worker_id} killed: still running {grace_s:g} s after it was told to "
                    "exit",
                    data={"grace_s": grace_s, "state": worker.state},
                    worker=worker,
                )
            except Exception:  # noqa: BLE001 - reaping must finish even if the store cannot be written
                logger.exception("could not record the kill of worker %d", worker.worker_id)
        with self._lock:
            worker.state = "dead"
        return rc

    def _event(
        self,
        kind: str,
        message: str,
        *,
        data: dict[str, Any] | None = None,
        worker: _Worker | None = None,
        index: int | None = None,
    ) -> None:
        """Record an event for ``trainguard show`` (loop thread only: the store has one writer)."""
        if self.run_id is None:
            return
        self.store.add_event(
            self.run_id,
            kind,
            message,
            data=data,
            worker_id=worker.worker_id if worker is not None else None,
            index=index,
        )

    def _end_worker(self, worker: _Worker, reason: str, detail: dict[str, Any]) -> None:
        if worker.ended:
            return
        worker.ended = True
        if self.run_id is not None:
            self.store.end_worker(self.run_id, worker.worker_id, reason=reason, detail=detail)

    def _on_death(self, worker: _Worker) -> None:
        previous = worker.state
        # the pipe may close while the process lingers (it closed its fds): make sure it is gone
        if worker.handle.wait(2.0) is None:
            worker.handle.kill()
        rc = self._reap(worker, grace_s=5.0)
        if previous == "exiting":
            return
        with self._lock:
            run, kill = worker.trial, worker.kill or worker.handle.kill_decision
            worker.trial = None
        if kill is not None:  # the sampler thread killed it; the loop records it (one store writer)
            during = f" (trial {run.index} attempt {run.attempt})" if run is not None else ""
            budget = worker.budget_kill
            self._event(
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
        if worker.protocol_error is not None:
            cause = EndCause(
                "protocol_error" if run is not None else None,
                "protocol_error",
                {"exitcode": rc},
                worker.protocol_error,
            )
        else:
            cause = worker.handle.classify(rc, in_trial=run is not None, kill=kill)
        self._end_worker(
            worker,
            cause.worker_reason,
            {**cause.detail, "message": cause.message, "trials": worker.trials_done},
        )
        if worker.budget_kill is not None:
            self._after_budget_kill(worker, run, cause)
            return
        if previous in ("starting", "loading") and cause.worker_reason not in ("node_lost", "pilot_lost"):
            # a worker that cannot start is a configuration problem; one whose node was lost is not
            raise WorkerCrashedError(
                f"worker {worker.worker_id} died before it was ready: {cause.message}; see its output above",
                pid=worker.handle.pid,
                exitcode=rc,
            )
        if run is None or cause.attempt_status is None:
            return
        peak = (
            max(worker.trial_peak_rss, int(kill.value) if kill and kill.status == "killed_memory" else 0)
            or None
        )
        error = {"status": cause.attempt_status, "message": cause.message, **cause.detail}
        logger.info("trial %d attempt %d: %s", run.index, run.attempt, cause.message)
        if cause.detail.get("rerun") and self._rerun_lost(worker, run, error, peak):
            return
        self._finish_attempt(
            worker, run, cause.attempt_status, error, None, peak, time.monotonic() - run.started_mono
        )

    def _rerun_lost(self, worker: _Worker, run: _Running, error: dict[str, Any], peak: int | None) -> bool:
        """A trial whose worker was lost with its cluster job (a Slurm pilot cancelled, preempted,
        out of time): the attempt is recorded, and the trial runs again elsewhere without using
        ``retries``, up to :data:`LOST_RERUNS_PER_TRIAL` times; False when that is spent."""
        done = self._lost_reruns.get(run.index, 0)
        if done >= LOST_RERUNS_PER_TRIAL:
            return False
        self._lost_reruns[run.index] = done + 1
        if self.run_id is not None:
            self.store.finish_attempt(
                self.run_id,
                run.index,
                run.attempt,
                status=str(error["status"]),
                error={**error, "attempt": run.attempt, "worker_id": worker.worker_id},
                peak_rss_bytes=peak,
                duration_s=time.monotonic() - run.started_mono,
            )
        self._event(
            "rerun",
            f"trial {run.index} attempt {run.attempt} on worker {worker.worker_id} was lost ({error['message']}); "
            f"it runs again as attempt {run.attempt + 1} (no retry used)",
            data={"status": error["status"], "message": error["message"], "attempt": run.attempt},
            worker=worker,
            index=run.index,
        )
        self._queue.appendleft(
            _Running(
                run.index,
                run.params,
                run.attempt + 1,
                run.session_attempts,
                attempt_params=run.attempt_params,
                mixed_precision=run.mixed_precision,
                oom_attempts=run.oom_attempts,
                sized=True,
            )
        )
        return True

    def _after_budget_kill(self, worker: _Worker, run: _Running | None, cause: EndCause) -> None:
        """A worker killed at the memory budget (recorded already): with fewer workers from now on,
        its trial runs again, the pool's doing, not the trial's: no ``retries`` are used, up to
        :data:`BUDGET_KILLS_PER_TRIAL` times; then the retry policy decides. A trial whose tree alone
        crossed the budget in a fresh worker (its first trial: nothing else in it) stops the run, as
        no concurrency can make it fit; in a worker grown by earlier trials it runs again in a fresh one."""
        choice = worker.budget_kill
        assert choice is not None
        budget = self._planner.budget_bytes or 0
        duration = None if run is None else time.monotonic() - run.started_mono
        peak = worker.trial_peak_rss or None
        error = {"status": "killed_budget", "message": cause.message, **cause.detail}
        if run is not None and choice.alone and worker.trials_done == 0:
            self._store_budget_killed(run, error, peak, duration)
            message = (
                f"memory_budget={format_bytes(budget)} is below one trial's measured peak: trial {run.index} "
                f"alone reached {format_bytes(choice.values['tree_bytes'])} and was killed at the budget: "
                "raise it above that (or make the trial smaller)"
            )
            self._event("budget_too_small", message, data=choice.values, worker=worker, index=run.index)
            raise ConfigError(message)
        if worker.spare:
            self._no_prestart = True
            self._event(
                "workers",
                f"no replacement is started early from now on: worker {worker.worker_id}, started early, "
                "was killed at the memory budget",
                data=choice.values,
                worker=worker,
            )
        else:
            others = sum(1 for w in self._live() if w is not worker and not w.spare and w.kill is None)
            change = self._planner.lower_after_kill(
                others,
                f"worker {worker.worker_id} was killed at the memory budget (the workers' trees summed "
                f"{format_bytes(choice.values['sum_bytes'])}, budget {format_bytes(budget)})",
            )
            if change is not None:
                self._event("workers", change.message, data=change.values, worker=worker)
        if run is None:
            return
        if run.budget_kills >= BUDGET_KILLS_PER_TRIAL:
            self._finish_attempt(worker, run, "killed_budget", error, None, peak, duration)
            return
        self._store_budget_killed(run, error, peak, duration)
        where = (
            f"its worker's tree alone, grown by {worker.trials_done} earlier trials, crossed it"
            if choice.alone
            else "beside other work"
        )
        self._event(
            "retry",
            f"trial {run.index} attempt {run.attempt} on worker {worker.worker_id} ended with killed_budget "
            f"(killed at the memory budget, {where}); running again as attempt {run.attempt + 1} "
            f"with at most {self._planner.target} worker{'s' if self._planner.target != 1 else ''} at once "
            "(a kill at the budget uses no retries)",
            data={"status": "killed_budget", "attempt": run.attempt, "workers": self._planner.target},
            worker=worker,
            index=run.index,
        )
        self._queue.appendleft(
            _Running(
                run.index,
                run.params,
                run.attempt + 1,
                run.session_attempts,
                attempt_params=run.attempt_params,
                mixed_precision=run.mixed_precision,
                oom_attempts=run.oom_attempts,
                sized=True,
                budget_kills=run.budget_kills + 1,
            )
        )

    def _store_budget_killed(
        self, run: _Running, error: dict[str, Any], peak: int | None, duration: float | None
    ) -> None:
        """Record the attempt as ``killed_budget`` (the trial itself stays unfinished)."""
        if self.run_id is not None:
            self.store.finish_attempt(
                self.run_id,
                run.index,
                run.attempt,
                status="killed_budget",
                error=error,
                peak_rss_bytes=peak,
                duration_s=duration,
            )

    # -- sampling ---------------------------------------------------------------------------------

    def _start_sampler(self) -> None:
        try:
            from trainguard.probes.nvml import gpu_memory_by_pid, nvml_available

            if nvml_available():
                self._nvml = gpu_memory_by_pid
        except ImportError:
            self._nvml = None
        self._sampler_thread = threading.Thread(
            target=self._sample_loop, name="trainguard-sampler", daemon=True
        )
        self._sampler_thread.start()

    def _sample_loop(self) -> None:
        interval = self.config.sample_interval_s
        next_t = time.monotonic()
        while True:
            next_t += interval
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (a slow read): do not burst to catch up
                next_t, delay = time.monotonic(), 0.0
            if self._stop_event.wait(delay):
                return
            try:
                self._sample_once()
            except Exception:  # noqa: BLE001 - the sampler must outlive any one bad reading
                logger.exception("memory sampling failed")

    def _sample_once(self) -> None:
        gpu_map = self._nvml() if self._nvml is not None else None
        with self._lock:
            workers = [w for w in self._workers if w.state not in ("dead",)]
        now_wall = time.time()
        for worker in workers:
            reading = self._read_tree(worker, uss=self.config.uss)
            if reading is None:
                continue
            rss, uss = reading
            gpu = worker.handle.gpu_bytes(gpu_map)
            with self._lock:
                worker.cur_rss = rss
                run, kill = worker.trial, worker.kill
                if run is not None:
                    worker.trial_peak_rss = max(worker.trial_peak_rss, rss)
                    worker.stage_peak_rss = max(worker.stage_peak_rss, rss)
                    if gpu is not None:
                        worker.trial_peak_gpu = max(worker.trial_peak_gpu or 0, gpu)
                self._samples.setdefault(worker.worker_id, []).append((now_wall, rss, uss, gpu))
            if run is None or kill is not None or worker.handle.enforces_limits:
                continue
            decision = check_limits(
                self.policy, rss_bytes=rss, gpu_bytes=gpu, elapsed_s=time.monotonic() - run.started_mono
            )
            if decision is not None:
                with self._lock:
                    if worker.trial is not run:
                        continue
                    worker.kill = decision
                worker.handle.kill()
                logger.info("worker %d: %s", worker.worker_id, decision.message)
        if self._planner.budget_bytes is not None:
            self._enforce_budget(self._planner.budget_bytes, now_wall)

    def _enforce_budget(self, budget: int, now_wall: float) -> None:
        """The memory budget as a hard bound (sampler thread): when this sample of every worker tree
        sums over it, kill the worker :func:`choose_budget_kill` names at once; the loop records it,
        lowers the concurrency and runs its trial again (:meth:`_after_budget_kill`)."""
        now = time.monotonic()
        with self._lock:
            total = sum(w.cur_rss or 0 for w in self._workers if w.state != "dead")
            if total > budget and (self._budget_over is None or total > self._budget_over[0]):
                self._budget_over = (total, now_wall)
            # a worker already killed, or told to exit and being reaped, frees its memory anyway
            counted = [w for w in self._workers if w.state not in ("dead", "exiting") and w.kill is None]
            candidates = [
                (w.worker_id, w.cur_rss or 0, None if w.trial is None else now - w.trial.started_mono)
                for w in counted
            ]
        choice = choose_budget_kill(budget, candidates)
        if choice is None:
            return
        with self._lock:
            worker = next(w for w in counted if w.worker_id == choice.worker_id)
            if worker.state in ("dead", "exiting") or worker.kill is not None:
                return
            worker.kill = KillDecision("killed_budget", budget, choice.values["sum_bytes"], choice.message)
            worker.budget_kill = choice
        worker.handle.kill()
        logger.info("worker %d: %s", worker.worker_id, choice.message)

    def _read_tree(
        self, worker: _Worker, *, uss: bool = False, rediscover: bool = False
    ) -> tuple[int, int | None] | None:
        """One reading of a worker's tree, or None; a failed reading is logged and skipped, since
        losing a sample is harmless and a sampler fault must never end the run or its other workers."""
        try:
            if not self._private:
                return worker.handle.read(uss=uss, rediscover=rediscover)
            # shared data in use: the worker is charged its private memory (USS) wherever RSS is used
            reading = worker.handle.read(uss=True, rediscover=rediscover)
            if reading is None or reading[1] is None:
                return reading
            return reading[1], reading[1]
        except Exception:  # noqa: BLE001 - see above
            logger.exception("reading the memory of worker %d failed; reading skipped", worker.worker_id)
            return None

    def _flush_samples(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < 1.0:
            return
        self._last_flush = now
        with self._lock:
            over, self._budget_over = self._budget_over, None
        if (
            over is not None
            and self._planner.budget_bytes is not None
            and over[0] > self._budget_over_recorded
        ):
            self._budget_over_recorded = over[0]
            # the highest sum seen over the budget is said too (the kill that follows is its own event)
            self._event(
                "budget_exceeded",
                f"the workers' trees summed {format_bytes(over[0])}, over the memory budget "
                f"{format_bytes(self._planner.budget_bytes)} (one sample; the highest so far)",
                data={"rss_bytes": over[0], "budget_bytes": self._planner.budget_bytes, "at": over[1]},
            )
        with self._lock:
            batches, self._samples = self._samples, {}
        if self.run_id is None:
            return
        for worker_id, samples in batches.items():
            if samples:
                self.store.add_samples(self.run_id, worker_id, samples)

    # -- shutdown ---------------------------------------------------------------------------------

    def _shutdown(self, status: str) -> None:
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            if worker.state in ("dead",):
                continue
            interrupted = worker.state == "busy"
            if interrupted:
                worker.handle.kill()
                try:
                    index = worker.trial.index if worker.trial is not None else None
                    self._event(
                        "kill",
                        f"worker {worker.worker_id} killed in trial {index}: the run was {status}",
                        data={"run_status": status},
                        worker=worker,
                        index=index,
                    )
                except Exception:  # noqa: BLE001 - shutting down must reach every worker
                    logger.exception("could not record the kill of worker %d", worker.worker_id)
            elif worker.state != "exiting":
                try:
                    self._send(worker, {"op": "exit"})
                except OSError:
                    pass
            detail: dict[str, Any] = {"trials": worker.trials_done}
            if interrupted:
                detail["message"] = "stopped in the middle of a trial"
            try:
                self._end_worker(worker, "shutdown", detail)
            except Exception:  # noqa: BLE001 - shutting down must reach every worker
                logger.exception("could not record the end of worker %d", worker.worker_id)
            self._reap(worker, grace_s=3.0)
        try:
            used = [(w.concurrency, w.threads) for w in self._workers]
            for message in self._planner.threads.unresolved(used):
                self._event("threads", message)
        except Exception:  # noqa: BLE001 - shutting down must reach every worker
            logger.exception("could not record the thread choice")
        self._stop_event.set()
        if self._sampler_thread is not None:
            self._sampler_thread.join(timeout=2.0)
        try:
            self._flush_samples(force=True)
            if self.run_id is not None:
                self.store.finish_run(self.run_id, status, reason=self._end_reason)
        except Exception:  # noqa: BLE001 - never mask the error that brought us here
            logger.exception("could not record the end of run %s", self.name)
        finally:
            try:
                self.backend.close()
            except Exception:  # noqa: BLE001 - the rest of the clean-up must still run
                logger.exception("could not close the %s backend", self.backend.name)
            if self._lock_handle is not None:
                self._lock_handle.release()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            if self._checkpoints is not None:
                self._checkpoints.close()
            if self._owns_data and self._data is not None:
                self._data.close()

    def close(self) -> None:
        self._shutdown("interrupted")
