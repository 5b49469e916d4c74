"""The session's loop: the queue, dispatch, the workers' messages and results; the only part that waits.

Threads: the caller's thread runs this loop (dispatch, results, deaths, every store write through
the :class:`~trainguard.runner.session._recorder.Recorder`); one watchdog thread
(:class:`~trainguard.runner.session._sampling.TreeSampling`) reads every worker tree's memory at
``sample_interval_s`` and kills a tree the moment it crosses a hard limit, or one tree when their
sum crosses the run's memory budget (that must not wait for the loop; the loop records the kill and
acts on it). Both share the worker records of the :class:`~trainguard.runner.session._pool.Pool`
under its lock. What follows a failed attempt is :class:`~trainguard.runner.session._recovery.Recovery`'s
to decide; staged trials are :class:`~trainguard.runner.session._stages.Stages`'.

A session holds its run's lock for as long as it runs (``Store.lock_run``), keeps its temporary
files in a private folder made for it, treats SIGTERM and SIGHUP like Ctrl-C and raises all three
between passes of the loop, never inside one (:mod:`~trainguard.runner.session._interrupts`), and
parses what workers send as data.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from multiprocessing.connection import wait as wait_connections
from typing import TYPE_CHECKING, Any, cast

from trainguard.exceptions import FAILURE_ERRORS, ConfigError, DiskFullError, TrialError, WorkerCrashedError
from trainguard.runner._protocol import MessageReader, ProtocolError
from trainguard.runner.policy import EndCause, RecycleDecision, decide_recycle
from trainguard.runner.session._eta import eta_seconds
from trainguard.runner.session._interrupts import Interrupts
from trainguard.runner.session._last_seconds import LastSeconds
from trainguard.runner.session._pool import Pool
from trainguard.runner.session._predict import Predictions
from trainguard.runner.session._recorder import Recorder
from trainguard.runner.session._records import Attempt, WorkerRecord
from trainguard.runner.session._recovery import Recovery, device_key
from trainguard.runner.session._results import (
    RunProgress,
    TrialResult,
    WorkerProgress,
    default_run_name,
    stats_message,
)
from trainguard.runner.session._sampling import TreeSampling
from trainguard.runner.session._stages import Stages
from trainguard.runner.session._trim import on_trimmed

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainguard.runner._config import RunConfig
    from trainguard.runner._fnref import FnSpec
    from trainguard.runner.backends.base import BaseBackend
    from trainguard.runner.policy import Policy
    from trainguard.runner.policy._prediction_scope import PredictionScope
    from trainguard.store import Store

__all__ = ["Session", "TrialResult", "RunProgress", "WorkerProgress", "default_run_name"]


logger = logging.getLogger(__name__)


class Session:
    """One ``map``/``imap`` call: a run of ``fn`` over ``params`` in supervised workers."""

    def __init__(
        self,
        config: RunConfig,
        policy: Policy,
        store: Store | None,
        fn: FnSpec,
        params: list[dict[str, Any]],
        name: str,
        data: Any = None,
        backend: BaseBackend | None = None,
        environment: Callable[[], dict[str, Any] | None] | None = None,
        scope: PredictionScope | None = None,
    ) -> None:
        if backend is None:
            from trainguard.runner.backends.local import LocalBackend

            backend = LocalBackend()
        self.backend = backend
        self.config = config
        self.policy = policy
        self.fn = fn
        self.params = params
        self.name = name
        self.recorder = Recorder(store, name)
        self._environment = environment
        self._queue: deque[Attempt] = deque()
        self._out: deque[TrialResult] = deque()
        self._count_lock = threading.Lock()
        self._done = 0
        self._failed = 0
        self._done_this_session = 0
        self._started_mono = time.monotonic()
        self._last_done_mono: float | None = None
        self._stop_result: TrialResult | None = None
        self._closed = False
        self._interrupts = Interrupts()
        self._tmpdir: str | None = None
        self._end_reason: str | None = None
        # shared data (trainguard.share): the run's handle, whether this session owns it (arrays
        # given to map directly), and whether workers are charged private memory (USS) for it
        from trainguard.runner._shared import SharedData, active_shares, share

        self._owns_data = data is not None and not isinstance(data, SharedData)
        self._data = share(data) if self._owns_data else data
        private = self._data is not None or bool(active_shares())
        self.pool = Pool(
            config=config,
            policy=policy,
            backend=backend,
            recorder=self.recorder,
            fn_kind=fn.kind,
            private=private,
        )
        self.last = LastSeconds(policy)  # each worker's last seconds, and memory pressure
        self.sampling = TreeSampling(
            pool=self.pool,
            policy=policy,
            recorder=self.recorder,
            interval_s=config.sample_interval_s,
            uss=config.uss,
            last=self.last,
        )
        self.recovery = Recovery(
            policy=policy,
            recorder=self.recorder,
            fn_ref=fn.ref,
            run_name=name,
            device=device_key(
                memory_limit=policy.memory_limit,
                gpu_memory_limit=policy.gpu_memory_limit,
                gpus=config.gpu_slots,
                env=config.base_env,
            ),
        )
        self.predictions = Predictions(policy=policy, recorder=self.recorder, fn=fn, scope=scope)
        self.predictions.refuse = self.pool.gpu.refusal if self.pool.gpu is not None else None
        self.stages = Stages(
            policy=policy,
            recorder=self.recorder,
            pool=self.pool,
            staged_kind=fn.kind not in ("command", "node"),
            last=self.last,
        )

    @property
    def run_id(self) -> int | None:
        return self.recorder.run_id

    # -- progress ---------------------------------------------------------------------------------

    def progress(self) -> RunProgress:
        workers, recycles = self.pool.progress()
        with self._count_lock:
            done, failed, this_session = self._done, self._failed, self._done_this_session
            last_done = self._last_done_mono
        now, started = time.monotonic(), self._started_mono
        left = len(self.params) - done
        eta = eta_seconds(started=started, last_done=last_done, done=this_session, remaining=left, now=now)
        return RunProgress(
            self.name,
            len(self.params),
            done,
            failed,
            sum(1 for w in workers if w.state == "busy"),
            now - started,
            eta,
            workers,
            recycles,
        )

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> Iterator[TrialResult]:
        """Yield every trial's result as it finishes (earlier sessions' results first)."""
        status, full = "interrupted", None
        interrupts = self._interrupts
        with interrupts.installed():
            try:
                yield from self._begin()
                if self._queue:
                    self.backend.open(
                        slots=self.config.workers,
                        policy=self.policy,
                        sample_interval_s=self.config.sample_interval_s,
                        uss=self.config.uss or self.pool.private,
                    )
                    self.pool.say_initial()
                    self.sampling.start()
                while self._queue or self.pool.busy():
                    with interrupts.body():  # a signal raises at its end, not inside (_interrupts)
                        self._step()
                    while self._out:
                        yield self._out.popleft()
                while self._out:
                    yield self._out.popleft()
                status = "stopped" if self._stop_result is not None else "completed"
            except (ConfigError, WorkerCrashedError) as err:
                # the function did not load, or a worker could not start: keep the reason
                status, self._end_reason = "failed", str(err)
                raise
            except DiskFullError as err:  # the store's disk, or the checkpoints', filled up
                status, self._end_reason, full = "disk_full", getattr(err, "what", None) or str(err), err
            finally:
                self._shutdown(status)
        if full is not None:
            from trainguard.runner.session._ending import stopped_for_disk

            raise stopped_for_disk(self, full) from None
        if self._stop_result is not None:
            _raise_stopped(self._stop_result)

    def _step(self) -> None:
        """One pass of the loop: workers kept, trials sent, a poll of their messages (0.25 s)."""
        if self._stop_result is None:
            self.pool.maintain(len(self._queue) + sum(1 for w in self.pool.workers if w.state == "busy"))
        self._dispatch()
        self.predictions.refit()
        self._poll(0.25)
        self.pool.check_starting()
        self.sampling.flush()

    def _begin(self) -> Iterator[TrialResult]:
        recorder = self.recorder
        recorder.lock()
        from trainguard._tempdirs import make_dir, sweep

        sweep()  # shared data and temporary folders left by processes that were killed
        self._tmpdir = make_dir("run")  # 0700, a fresh name that says whose it is
        self.pool.capture_dir = self._tmpdir
        if recorder.persistent and self.config.fresh:
            recorder.replace_stored_run()
        old = recorder.stored_run()
        # the version that computed the stored results stays with the run until it is run afresh
        stored_version = old.config.get("fn_version") if old is not None else None
        settings = {
            "policy": self.policy.to_dict(),
            "workers": self.config.workers,
            **self.config.stored(),
            "fn_version": stored_version or self.fn.version,
            "seed": self.config.seed,
            "predict_from": self.predictions.scope.predict_from,
        }
        info = recorder.begin(self.fn.ref, self.params, settings)
        attempts_by_index: dict[int, int] = {}
        if info is not None and info.resumed and old is not None:
            recorder.warn_settings_changed(old.config, settings, info.sessions)
        if info is not None:
            self._record_session_start()
            records = recorder.trials()
            finished = [rec for rec in records if rec.status in ("ok", "failed")]
            if finished and stored_version and self.fn.version and stored_version != self.fn.version:
                recorder.warn_changed(len(finished), self.fn.ref)
            for rec in records:
                attempts_by_index[rec.index] = rec.attempts
                if rec.status in ("ok", "failed"):
                    with self._count_lock:
                        self._done += 1
                        self._failed += rec.status == "failed"
                    yield TrialResult.from_record(rec)
            self.pool.next_worker_id = recorder.next_worker_id()
        for index, params in recorder.unfinished(self.params):
            self._queue.append(Attempt(index, params, attempts_by_index.get(index, 0) + 1, 1))
        self.stages.open()
        self.predictions.open(budgeted=self.pool.planner.budgeted)

    def _record_session_start(self) -> None:
        seeds = None
        if self.config.seed is not None:
            from trainguard.runner.worker.seeding import derive_seed

            seeds = {i: derive_seed(self.config.seed, i) for i in range(len(self.params))}
        self.recorder.session_start(
            environment=self._environment() if self._environment is not None else None,
            shared=(self._data.path if self._data is not None else None) if self.pool.private else False,
            seeds=seeds,
        )

    def _seed_of(self, index: int) -> int | None:
        if self.config.seed is None:
            return None
        from trainguard.runner.worker.seeding import derive_seed

        return derive_seed(self.config.seed, index)

    def _dispatch(self) -> None:
        pool = self.pool
        for worker in list(pool.workers):
            if not self._queue or self._stop_result is not None:
                return
            if worker.state != "idle" or worker.spare:
                continue
            run = self._next_run(worker)
            if run is None or self._stop_result is not None:
                return
            if not pool.budget_check(worker, self.predictions.budget_bytes(run), run):
                continue
            with pool.lock:
                if worker.kill is not None:  # killed at the budget while idle: its death is coming
                    continue
            self._queue.remove(run)
            self.recovery.apply_fitted_size(run)
            self.predictions.apply_size(run)
            run.started_mono = time.monotonic()
            with pool.lock:
                if worker.kill is not None:  # killed in between: the trial waits for another worker
                    self._queue.appendleft(run)
                    continue
                worker.trial = run
                worker.state = "busy"
                worker.trial_peak_rss = worker.cur_rss or 0
                worker.trial_peak_gpu = None
                worker.kill = None
            worker.handle.trial_started()
            self.recorder.start_attempt(run.index, run.attempt, worker.worker_id)
            self.predictions.started(run)
            staged = self.stages.message(worker, run, self._data)
            try:
                worker.handle.send(
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
                    }
                )
            except OSError:
                pass  # it died; the EOF on its pipe reports the death with this trial attached

    def _next_run(self, worker: WorkerRecord) -> Attempt | None:
        """The pending trial ``worker`` takes (left in the queue; see :meth:`Predictions.next_run`)."""
        pool = self.pool
        room = None
        if pool.planner.budgeted:
            room = (pool.planner.budget_bytes or 0) - pool.reserved(exclude=worker)
        return self.predictions.next_run(self._queue, room, self._not_started)

    def _not_started(self, run: Attempt, error: dict[str, Any]) -> bool:
        """A trial ended unstarted (predicted over the limit); False once the run stops."""
        self._finish_trial(run, "failed", None, error, None, None, None)
        return self._stop_result is None

    def _poll(self, timeout: float) -> None:
        conns = {w.handle.inbox: w for w in self.pool.workers if w.state != "dead"}
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

    def _on_protocol_error(self, worker: WorkerRecord, cause: str) -> None:
        """A worker sent bytes that are not a message (its trial wrote onto the channel): end that
        worker and fail its trial with the cause; the run goes on with a fresh worker."""
        with self.pool.lock:
            worker.protocol_error = (
                f"worker {worker.worker_id} sent {cause}: something in the trial wrote onto trainguard's "
                "message channel, so the worker was ended"
            )
        logger.warning("worker %d: protocol error: %s", worker.worker_id, cause)
        worker.handle.kill()
        self._on_death(worker)

    # -- messages ---------------------------------------------------------------------------------

    def _on_message(self, worker: WorkerRecord, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "ready":
            self._on_ready(worker, msg)
        elif op == "stage":
            go_on = self.stages.on_checkpoint(worker, msg)
            try:
                worker.handle.send({"op": "stage_reply", "go_on": go_on})
            except OSError:
                pass  # it died; the EOF on its pipe reports the death
        elif op == "fn_ok":
            with self.pool.lock:
                worker.state = "idle"
            if worker.spare:
                self.pool.planner.spare_ready(worker.cur_rss)
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
        elif op == "trimmed":
            on_trimmed(self, worker, msg)

    def _on_ready(self, worker: WorkerRecord, msg: dict[str, Any]) -> None:
        worker.handle.on_ready(msg)
        try:
            worker.handle.send({"op": "fn", "key": 0, "kind": self.fn.kind, "payload": self.fn.payload})
        except OSError:
            return  # it died after saying ready; the EOF on its pipe reports the death
        with self.pool.lock:
            worker.state = "loading"
        self.recorder.worker_ready(worker.worker_id, msg, self.config.preload)

    def _on_result(self, worker: WorkerRecord, msg: dict[str, Any]) -> None:
        run = worker.trial
        if run is None or run.index != msg["index"]:
            return
        if msg["status"] == "staged":
            resumed, decision = self.stages.left_at_checkpoint(worker, run, float(msg["duration_s"]))
            self._queue.appendleft(resumed)
            self.pool.retire(worker, decision)
            return
        self.recorder.tmpfs_removed(worker, run, worker.handle.trial_ended())
        reading = self.pool.read_tree(worker, rediscover=True)
        own_rss = int(msg.get("rss_bytes") or 0)
        rss_after = reading[0] if reading else own_rss
        children = max(0, rss_after - own_rss)
        # the worker's own high-water mark counts shared data's pages: not used when it is charged
        # private memory only
        hwm = 0 if self.pool.private else (msg.get("hwm_bytes") or 0) + children
        with self.pool.lock:
            worker.trial = None
            worker.state = "idle"
            worker.cur_rss = rss_after
            peak = max(worker.trial_peak_rss, rss_after, hwm)
            worker.trial_ended(rss_after, peak, (msg.get("stats") or {}).get("bytes_in_use"))
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
        duration = float(msg["duration_s"])
        if status != "ok" and (msg.get("error") or {}).get("disk_full"):
            # before any other write to the store: on the same disk it would fail first
            from trainguard.runner.session._ending import trial_filled_the_disk

            trial_filled_the_disk(self, worker, run, msg["error"], peak, duration)  # raises
        if any(k in stats for k in ("census", "tfjs", "node", "fragmentation")) or stats.get("cleanup_s"):
            self.recorder.trial_stats(worker.worker_id, run.index, stats_message(run.index, stats), stats)
        self.recorder.bytes_in_use(worker.worker_id, run.index, run.attempt, stats)
        flight = self.last.result(self.recorder, worker, msg, status, stats, rss_after)
        self._finish_attempt(worker, run, status, msg.get("error"), value, peak, duration, flight=flight)
        worker.reserved_bytes = None
        if status == "ok":
            self.pool.plan_after_trial(worker, peak, rss_after, duration, run=run, stats=stats)
        self._after_trial(worker, run, status, stats)

    def _after_trial(self, worker: WorkerRecord, run: Attempt, status: str, stats: dict[str, Any]) -> None:
        """Whether the worker that ran ``run`` is recycled now, or a replacement is started early."""
        if status == "framework_oom":
            # what the failed allocation held, and the fragmentation it left, stay in this process
            # (empty_cache() does not give it back): never run another trial in it
            self.pool.retire(
                worker,
                RecycleDecision(
                    "out_of_memory",
                    {"index": run.index, "attempt": run.attempt},
                    f"trial {run.index} ran out of memory in it: a worker is never reused after an OOM",
                ),
            )
            return
        if not self._queue or self._stop_result is not None:
            return
        decision = decide_recycle(self.policy, self.pool.history(worker))
        if decision is not None and decision.trim_first:
            self.pool.trim(worker)  # decided again on its answer (_on_trimmed)
        elif decision is not None:
            self.pool.retire(worker, decision)
        elif self._queue:
            self.pool.maybe_prestart(worker, stats)

    def _finish_attempt(
        self,
        worker: WorkerRecord | None,
        run: Attempt,
        status: str,
        error: dict[str, Any] | None,
        value: Any,
        peak: int | None,
        duration_s: float | None,
        *,
        flight: dict[str, Any] | None = None,
    ) -> None:
        """Record an attempt's end (a flight recorder on the attempt only); queue what follows, or finish."""
        worker_id = worker.worker_id if worker else None
        run.peak_gpu_bytes = worker.trial_peak_gpu if worker else None
        error = self.recovery.failure(run, status, error, worker_id)
        stored = error if flight is None else {**(error or {}), "flight_recorder": flight}
        if status != "ok":
            self.stages.attempt_ended(run.index)  # a half-written checkpoint is never resumed
        self.recorder.finish_attempt(
            run.index, run.attempt, status=status, error=stored, peak_rss_bytes=peak, duration_s=duration_s
        )
        self.predictions.observe(run, status, peak, worker)
        following, error = self.recovery.next_attempt(worker, run, status, error, peak)
        if following is not None:
            self._queue.appendleft(following)
            return
        self._finish_trial(run, status, value, error, peak, worker_id, duration_s)

    def _finish_trial(
        self,
        run: Attempt,
        status: str,
        value: Any,
        error: dict[str, Any] | None,
        peak: int | None,
        worker_id: int | None,
        duration_s: float | None,
    ) -> None:
        """Store a trial's outcome and hand its result out (also for a trial never started: its
        ``attempts`` are then the ones before this session's)."""
        started = error is None or error.get("status") != "predicted_over_limit"
        if started:
            peak, duration_s = self.stages.whole_trial(run, peak, duration_s)
        fields: dict[str, Any] = {
            "status": "ok" if status == "ok" else "failed",
            "value": value,
            "error": error,
            "attempts": run.attempt if started else run.attempt - 1,
            "peak_rss_bytes": peak,
            "worker_id": worker_id,
            "duration_s": duration_s,
        }
        if self.recorder.finish_trial(run.index, **fields) is False:
            return  # already finished by an earlier session: never report it twice
        self.stages.trial_done(run.index)
        result = TrialResult(
            index=run.index,
            params=run.params,
            **fields,
            ran_with=run.attempt_params,
            seed=self._seed_of(run.index),
            predicted_peak_bytes=self.predictions.predicted_peak_bytes(run.index),
            peak_gpu_bytes=run.peak_gpu_bytes if started else None,
        )
        with self._count_lock:
            self._done += 1
            self._done_this_session += 1
            self._last_done_mono = time.monotonic()
            self._failed += not result.ok
        self._out.append(result)
        if not result.ok and self.policy.on_error == "stop" and self._stop_result is None:
            self._stop_result = result
            self._queue.clear()

    # -- deaths -----------------------------------------------------------------------------------

    def _on_death(self, worker: WorkerRecord) -> None:
        previous = worker.state
        # the pipe may close while the process lingers (it closed its fds): make sure it is gone
        if worker.handle.wait(2.0) is None:
            worker.handle.kill()
        rc = self.pool.reap(worker, grace_s=5.0)
        if previous == "exiting":
            return
        with self.pool.lock:
            run, kill = worker.trial, worker.kill or worker.handle.kill_decision
            worker.trial = None
        if run is not None:  # the files its trial left in /dev/shm: their memory outlives it
            self.recorder.tmpfs_removed(worker, run, worker.handle.trial_ended())
        if kill is not None:  # the sampler thread killed it; the loop records it (one store writer)
            self.recorder.kill(worker, run, kill)
        if worker.protocol_error is not None:
            cause = EndCause(
                "protocol_error" if run is not None else None,
                "protocol_error",
                {"exitcode": rc},
                worker.protocol_error,
            )
        else:
            cause = worker.handle.classify(rc, in_trial=run is not None, kill=kill)
        self.recorder.end_worker(
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
        flight = self.last.flight_record(worker.worker_id, cause.attempt_status)
        self.last.record_end(self.recorder, worker, _pressure_end(kill), rss_bytes=peak)
        duration = time.monotonic() - run.started_mono
        again = (
            self.recovery.rerun_after_loss(worker, run, error, peak, duration)
            if cause.detail.get("rerun")
            else None
        )
        if again is not None:
            self._queue.appendleft(again)
            return
        self._finish_attempt(worker, run, cause.attempt_status, error, None, peak, duration, flight=flight)

    def _after_budget_kill(self, worker: WorkerRecord, run: Attempt | None, cause: EndCause) -> None:
        from trainguard.runner.session._budget_kill import after_budget_kill

        after_budget_kill(self, worker, run, cause)

    # -- shutdown ---------------------------------------------------------------------------------

    def _shutdown(self, status: str) -> None:
        if self._closed:
            return
        self._closed = True
        from trainguard.runner.session._ending import shutdown

        shutdown(self, status)

    def close(self) -> None:
        self._shutdown("interrupted")

    def interrupt(self) -> None:
        """Stop the running loop as Ctrl-C would, from another thread: the thread iterating
        :meth:`run` gets ``KeyboardInterrupt`` within one poll, and the session ends interrupted
        (busy workers killed and recorded so, the stopped trials left pending)."""
        self._interrupts.request()


def _pressure_end(kill: Any) -> Any:
    """How a pressure ended when its worker died: its grace ran out, or it was ignored."""
    grace = kill is not None and kill.message.startswith("killed under memory pressure")
    return "grace_expired" if grace else "ignored"


def _raise_stopped(r: TrialResult) -> None:
    """``on_error='stop'``: the run stopped at a failed trial; raise its error."""
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
