"""The session's loop: the queue, dispatch, the workers' messages and results; the only part that waits.

Threads: the caller's thread runs this loop (dispatch, results, deaths, every store write through
the :class:`~trainguard.runner.session._recorder.Recorder`); one watchdog thread
(:class:`~trainguard.runner.session._sampling.TreeSampling`) reads every worker tree's memory at
``sample_interval_s`` and kills a tree the moment it crosses a hard limit, or one tree when their
sum crosses the run's memory budget (that must not wait for the loop; the loop records the kill and
acts on it). Both share the worker records of the :class:`~trainguard.runner.session._pool.Pool`
under its lock. What follows a failed attempt is :class:`~trainguard.runner.session._recovery.Recovery`'s
to decide; staged trials are :class:`~trainguard.runner.session._stages.Stages`'.

The loop alone holds the queue and the session's private state. The parts it calls after a
worker's end (:mod:`~trainguard.runner.session._deaths`, :mod:`~trainguard.runner.session._budget_kill`),
a trial's result (:mod:`~trainguard.runner.session._trial_end`) or a trim
(:mod:`~trainguard.runner.session._trim`) return a decision (a
:class:`~trainguard.runner.session._records.Rerun`, a
:class:`~trainguard.runner.session._records.Finish`, a recycle) that :meth:`Session._apply` and
its callers carry out; :class:`~trainguard.runner.session._outcomes.Outcomes` records the ends and
says what follows, and the loop queues it.

A session holds its run's lock for as long as it runs (``Store.lock_run``), keeps its temporary
files in a private folder made for it, treats SIGTERM and SIGHUP like Ctrl-C and raises all three
between passes of the loop, never inside one (:mod:`~trainguard.runner.session._interrupts`), and
parses what workers send as data.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Iterator
from multiprocessing.connection import wait as wait_connections
from typing import TYPE_CHECKING, Any, cast

from trainguard.exceptions import FAILURE_ERRORS, ConfigError, DiskFullError, TrialError, WorkerCrashedError
from trainguard.runner._protocol import MessageReader, ProtocolError
from trainguard.runner.session._deaths import after_death, protocol_error
from trainguard.runner.session._dispatch import start_trial
from trainguard.runner.session._ending import shutdown, stopped_for_disk
from trainguard.runner.session._interrupts import Interrupts
from trainguard.runner.session._outcomes import Outcomes
from trainguard.runner.session._pool import Pool
from trainguard.runner.session._predict import Predictions
from trainguard.runner.session._recorder import Recorder
from trainguard.runner.session._records import Attempt, Finish, Rerun, WorkerRecord
from trainguard.runner.session._recovery import Recovery, device_key
from trainguard.runner.session._results import RunProgress, TrialResult, WorkerProgress, default_run_name
from trainguard.runner.session._sampling import TreeSampling
from trainguard.runner.session._stages import Stages
from trainguard.runner.session._trial_end import decide_worker_next, read_result
from trainguard.runner.session._trim import on_trimmed
from trainguard.runner.session.soft_limit_and_flight import LastSeconds

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainguard.outcomes import Failure
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
        self.outcomes = Outcomes(
            policy=policy,
            recorder=self.recorder,
            recovery=self.recovery,
            stages=self.stages,
            predictions=self.predictions,
            seed_of=functools.partial(_seed, config.seed),
        )

    @property
    def run_id(self) -> int | None:
        return self.recorder.run_id

    # -- progress ---------------------------------------------------------------------------------

    def progress(self) -> RunProgress:
        workers, recycles = self.pool.progress()
        return self.outcomes.progress(self.name, len(self.params), workers, recycles)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> Iterator[TrialResult]:
        """Yield every trial's result as it finishes (earlier sessions' results first)."""
        status, full = "interrupted", None
        interrupts, out = self._interrupts, self.outcomes.out
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
                    self.pool.budget.say_initial()
                    self.sampling.start()
                while self._queue or self.pool.busy():
                    with interrupts.body():  # a signal raises at its end, not inside (_interrupts)
                        self._step()
                    while out:
                        yield out.popleft()
                while out:
                    yield out.popleft()
                status = "stopped" if self.outcomes.stop_result is not None else "completed"
            except (ConfigError, WorkerCrashedError) as err:
                # the function did not load, or a worker could not start: keep the reason
                status, self._end_reason = "failed", str(err)
                raise
            except DiskFullError as err:  # the store's disk, or the checkpoints', filled up
                status, self._end_reason, full = "disk_full", getattr(err, "what", None) or str(err), err
            finally:
                self._shutdown(status)
        if full is not None:
            raise stopped_for_disk(self.recorder, self.name, full) from None
        if self.outcomes.stop_result is not None:
            _raise_stopped(self.outcomes.stop_result)

    def _step(self) -> None:
        """One pass of the loop: workers kept, trials sent, a poll of their messages (0.25 s)."""
        if self.outcomes.stop_result is None:
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
            _record_session_start(self)
            records = recorder.trials()
            finished = [rec for rec in records if rec.status in ("ok", "failed")]
            if finished and stored_version and self.fn.version and stored_version != self.fn.version:
                recorder.warn_changed(len(finished), self.fn.ref)
            for rec in records:
                attempts_by_index[rec.index] = rec.attempts
                if rec.status in ("ok", "failed"):
                    yield self.outcomes.resumed(rec)
            self.pool.next_worker_id = recorder.next_worker_id()
        for index, params in recorder.unfinished(self.params):
            self._queue.append(Attempt(index, params, attempts_by_index.get(index, 0) + 1, 1))
        self.stages.open()
        self.predictions.open(budgeted=self.pool.planner.budgeted)

    def _dispatch(self) -> None:
        pool = self.pool
        for worker in list(pool.workers):
            if not self._queue or self.outcomes.stop_result is not None:
                return
            if worker.state != "idle" or worker.spare:
                continue
            run = self._next_run(worker)
            if run is None or self.outcomes.stop_result is not None:
                return
            if not pool.budget.check(worker, self.predictions.budget_bytes(run), run):
                continue
            with pool.lock:
                if worker.kill is not None:  # killed at the budget while idle: its death is coming
                    continue
            self._queue.remove(run)
            took = start_trial(
                pool=pool,
                recorder=self.recorder,
                recovery=self.recovery,
                predictions=self.predictions,
                stages=self.stages,
                config=self.config,
                data=self._data,
                worker=worker,
                run=run,
                seed=_seed(self.config.seed, run.index),
            )
            if not took:
                self._queue.appendleft(run)

    def _next_run(self, worker: WorkerRecord) -> Attempt | None:
        """The pending trial ``worker`` takes (left in the queue; see :meth:`Predictions.next_run`)."""
        pool = self.pool
        room = None
        if pool.planner.budgeted:
            room = (pool.planner.budget_bytes or 0) - pool.reserved(exclude=worker)
        return self.predictions.next_run(self._queue, room, self._not_started)

    def _not_started(self, run: Attempt, error: Failure) -> bool:
        """A trial ended unstarted (predicted over the limit); False once the run stops."""
        going = self.outcomes.stop_result is None
        self.outcomes.finish_trial(run, "failed", None, error, None, None, None)
        if going and self.outcomes.stop_result is not None:
            self._queue.clear()
        return self.outcomes.stop_result is None

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
            except ProtocolError as err:  # its trial wrote onto the channel: it ends, the run goes on
                protocol_error(self.pool, worker, str(err))
                self._on_death(worker)
                continue
            for msg in messages:
                if worker.state == "dead":
                    break
                self._on_message(worker, msg)

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
        elif op in ("fn_error", "fatal"):
            raise _load_error(self.fn.ref, worker, msg)
        elif op == "result":
            self._on_result(worker, msg)
        elif op == "trimmed":
            more = bool(self._queue) and self.outcomes.stop_result is None
            recycle = on_trimmed(
                pool=self.pool,
                recorder=self.recorder,
                policy=self.policy,
                worker=worker,
                msg=msg,
                more_to_run=more,
            )
            if recycle is not None:
                self.pool.retire(worker, recycle)

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
        with self.recorder.batch():  # the trial's end: its rows in one commit of the store
            end = read_result(
                pool=self.pool,
                recorder=self.recorder,
                stages=self.stages,
                last=self.last,
                worker=worker,
                run=run,
                msg=msg,
            )
            self._apply(worker, end.finish)
        worker.reserved_bytes = None
        status = end.finish.status
        if status == "ok":
            self.pool.plan_after_trial(
                worker, end.peak, end.rss_after, float(msg["duration_s"]), run=run, stats=end.stats
            )
        more = bool(self._queue) and self.outcomes.stop_result is None
        history = self.pool.history(worker) if more and status != "framework_oom" else None
        following = decide_worker_next(self.policy, history, run, status, more_to_run=more)
        if following.action == "trim":
            self.pool.trim(worker)  # decided again on its answer (_trim.on_trimmed)
        elif following.action == "retire" and following.decision is not None:
            self.pool.retire(worker, following.decision)
        elif following.action == "prestart" and self._queue:
            self.pool.maybe_prestart(worker, end.stats)

    def _apply(self, worker: WorkerRecord | None, action: Rerun | Finish | None) -> None:
        """Carry out a part's decision on an attempt: queue its rerun, or end it (and queue what the
        recovery says follows; the queue is emptied when the end stops the run)."""
        if isinstance(action, Rerun):
            self._queue.appendleft(action.attempt)
        elif action is not None:
            going = self.outcomes.stop_result is None
            following = self.outcomes.finish_attempt(worker, action)
            if following is not None:
                self._queue.appendleft(following)
            elif going and self.outcomes.stop_result is not None:
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
        action = after_death(
            pool=self.pool,
            recorder=self.recorder,
            recovery=self.recovery,
            last=self.last,
            worker=worker,
            previous=previous,
            rc=rc,
        )
        self._apply(worker, action)

    # -- shutdown ---------------------------------------------------------------------------------

    def _shutdown(self, status: str) -> None:
        if self._closed:
            return
        self._closed = True
        owned = self._data if self._owns_data else None
        shutdown(self, status, reason=self._end_reason, tmpdir=self._tmpdir, owned_data=owned)

    def close(self) -> None:
        self._shutdown("interrupted")

    def interrupt(self) -> None:
        """Stop the running loop as Ctrl-C would, from another thread: the thread iterating
        :meth:`run` gets ``KeyboardInterrupt`` within one poll, and the session ends interrupted
        (busy workers killed and recorded so, the stopped trials left pending)."""
        self._interrupts.request()


def _seed(seed: int | None, index: int) -> int | None:
    """Trial ``index``'s seed under the run's ``seed`` (None: none)."""
    if seed is None:
        return None
    from trainguard.runner.worker.seeding import derive_seed

    return derive_seed(seed, index)


def _record_session_start(session: Session) -> None:
    """The session's start in the store: its environment, its shared data and its trials' seeds."""
    seed = session.config.seed
    seeds = None
    if seed is not None:
        from trainguard.runner.worker.seeding import derive_seed

        seeds = {i: derive_seed(seed, i) for i in range(len(session.params))}
    data = session._data
    session.recorder.session_start(
        environment=session._environment() if session._environment is not None else None,
        shared=(data.path if data is not None else None) if session.pool.private else False,
        seeds=seeds,
    )


def _load_error(ref: str, worker: WorkerRecord, msg: dict[str, Any]) -> ConfigError:
    """A worker could not load the function (``fn_error``) or start at all (``fatal``)."""
    if msg["op"] == "fatal":
        return ConfigError(f"worker {worker.worker_id} could not start: {msg['message']}")
    if msg.get("nested"):
        return ConfigError(msg["nested"], traceback=msg.get("traceback"))
    return ConfigError(
        f"fn {ref} cannot be loaded in the worker: {msg['message']}", traceback=msg.get("traceback")
    )


def _raise_stopped(r: TrialResult) -> None:
    """``on_error='stop'``: the run stopped at a failed trial; raise its error."""
    error = r.error
    why, status = (error.message, error.status) if error is not None else (r.status, r.status)
    # a kill or a crash: the error of that cause, chained (the function itself did not raise)
    cause = FAILURE_ERRORS.get(status)
    raise TrialError(
        f"trial {r.index} failed ({why}) and on_error='stop': "
        f"the run stopped; run it again to resume the trials left",
        index=r.index,
        status=status,
        error=r.error,
    ) from (cause(why, index=r.index, status=status) if cause is not None else None)
