"""Optuna studies whose objective runs in trainguard workers (parent side).

How a trial runs (see docs/explanation/architecture.md, "Integrations"):

- Optuna's own loop runs in the parent: ``study.optimize`` asks the sampler, calls the guarded
  objective, tells the result, runs callbacks. With ``workers > 1`` it runs ``n_jobs=workers``
  threads that only wait, so the sampler is always asked in the parent and only the parent talks
  to the study's storage; any storage works.
- The guarded objective hands the ``optuna.Trial`` to the guarded-call engine that
  ``@trainguard.isolated`` and the notebook magic also run on (:class:`trainguard.guarded.CallPool`):
  a :class:`trainguard.Runner` running *slots* (``{"slot": i}``) of
  :class:`~trainguard.integrations._optuna_worker.SlotFunction` in supervised workers, reused and
  recycled by the policy and killed at its limits. A slot connects to the parent's bridge (a unix
  socket in a private 0700 folder, with a random authkey), takes the next trial waiting, and runs
  the user's objective with a proxy whose calls a bridge thread answers with the real trial's
  methods (JSON both ways).
- When the slot's Runner result comes back (the objective's value, ``TrialPruned``, an exception,
  or the worker killed for memory, a timeout or a crash), the objective returns, raises
  ``TrialPruned``, or fails the trial with the cause and the peak memory as user attributes.

The Runner's protocol is unchanged: the Runner sees ordinary trials whose value is JSON.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from trainguard.exceptions import (
    FAILURE_ERRORS,
    ConfigError,
    FrameworkOOMError,
    TrialError,
    WorkerError,
    missing,
)
from trainguard.guarded import BaseJob, CallPool, recv_json, send_json
from trainguard.integrations._optuna_memory import (
    MemoryConstraints,
    NotStarted,
    TrialPeaks,
    memory_constraints,
    not_to_start,
    study_constraints,
    uses_memory_constraints,
)
from trainguard.integrations._optuna_worker import SlotFunction, TrialProxy
from trainguard.outcomes import OOM_STATUSES, Failure
from trainguard.runner.policy import Policy, should_retry

__all__ = [
    "optimize",
    "isolated",
    "IsolatedObjective",
    "TrialProxy",
    "ATTR_PREFIX",
    "default_policy",
    "memory_constraints",
]

logger = logging.getLogger(__name__)

#: Prefix of the user attributes trainguard sets on each trial.
ATTR_PREFIX = "trainguard_"

# what a failed attempt's status becomes in the parent, when it is not the objective's own exception
_ERRORS = FAILURE_ERRORS
_GETTABLE = ("params", "user_attrs", "relative_params", "datetime_start")
_CALLABLE = ("report", "should_prune", "set_user_attr")
_DROP_IN_SLOTS = 1000


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as err:
        raise missing("optuna", "trainguard.optuna", extra="optuna") from err
    return optuna


def default_policy() -> Policy:
    """The policy a guarded study runs with when given none: the Runner's default, with the
    ``peak_ratio`` budget also paying for the study's own process (``budget_counts_supervisor``,
    which a policy you give gets too unless it sets it to False).

    The reference a guarded study is held to is the same study in one process, where the study
    and the objective share one interpreter; guarded, the study's process (Optuna, its sampler,
    trainguard's supervisor: about 50-60 MiB) sits beside the worker, so the worker's own budget
    is that much smaller.

    Returns:
        The policy.
    """
    return Policy(budget_counts_supervisor=True)


def _check_study(study: Any) -> None:
    optuna = _optuna()
    if not isinstance(study, optuna.study.Study):
        raise ConfigError(
            f"study must be an optuna.Study (optuna.create_study(...)), not {type(study).__name__}"
        )


# --------------------------------------------------------------------------------------------------
# the job: one Optuna trial, on the guarded-call engine (trainguard.guarded.CallPool)


class _TrialJob(BaseJob):
    """One Optuna trial handed to a slot: the slot gets its number, and the bridge answers its
    proxy's calls with the real trial's methods."""

    def __init__(self, trial: Any) -> None:
        super().__init__()
        self.trial = trial

    def open(self, conn: Connection) -> None:
        send_json(conn, {"op": "trial", "number": self.trial.number})

    def converse(self, conn: Connection) -> None:
        trial = self.trial
        while True:
            message = recv_json(conn)  # EOFError when the objective is done or the worker died
            try:
                if message.get("op") == "get" and message.get("name") in _GETTABLE:
                    value = getattr(trial, message["name"])
                    if message["name"] == "datetime_start":
                        value = value.isoformat() if value is not None else None
                elif message.get("op") == "call" and (
                    message.get("method") in _CALLABLE or str(message.get("method")).startswith("suggest_")
                ):
                    method = getattr(trial, message["method"], None)
                    if method is None:
                        raise AttributeError(f"this Optuna's Trial has no {message['method']}")
                    value = method(*message.get("args", []), **message.get("kwargs", {}))
                else:
                    raise AttributeError(f"the trial proxy cannot do {message!r}")
                send_json(conn, {"ok": True, "value": value})
            except Exception as err:  # noqa: BLE001 - the objective gets the error, in its worker
                send_json(conn, {"ok": False, "type": type(err).__name__, "message": str(err)})


_CLOSED = "this guarded objective was closed: create a new one with trainguard.optuna.isolated(...)"


# --------------------------------------------------------------------------------------------------
# the objective Optuna calls


class IsolatedObjective:
    """An Optuna objective whose every call runs the real objective in a supervised trainguard
    worker; :func:`isolated` is this class under the name the integration documents.

    Call ``close()`` (or use it as a context manager) when done; otherwise its workers end when it
    is garbage-collected or at interpreter exit.

    Drop-in: ``study.optimize(trainguard.optuna.isolated(objective), n_trials=30)``. With
    ``workers=2`` pass ``n_jobs=2`` to ``study.optimize`` too. The objective receives a proxy
    trial (see :class:`~trainguard.integrations._optuna_worker.TrialProxy`).

    Args:
        objective: ``objective(trial) -> float | list[float]``; a callable (by reference when
            importable, else cloudpickled) or ``"module:function"`` / ``"file.py:function"``.
        workers: worker processes (the Runner's ``workers``).
        policy: a :class:`trainguard.Policy`: recycling, ``memory_limit``, ``timeout``,
            ``retries`` (a retried trial's params are enqueued in the study again). Default:
            :func:`default_policy` (the Runner's default, its budget also paying for the study's
            own process); a policy you give counts the study's process too unless it says
            ``budget_counts_supervisor=False``.
        store: a trainguard store for the workers' history (default None: the study is the record).
        name: the run name in the store.
        on_failure: what a trial whose worker was killed or crashed does: ``"nan"`` (default; Optuna
            records it FAIL and goes on, whatever ``catch`` says) or ``"raise"`` the
            ``trainguard.WorkerError`` (Optuna goes on only if it is in ``catch``).
        slots: trials a Runner session takes at a time (a session that runs out starts another).
        catch: the exception classes you pass to ``study.optimize(catch=...)``, when the
            objective's exception types cannot be found by name in this process (a file ref such
            as ``"objectives.py:objective"``); a type from a module imported here is found anyway.
        memory_objective: memory as one more objective: each trial's value is the objective's
            value(s) followed by its measured peak (``trainguard_peak_rss_bytes``), so a study with
            ``directions=["minimize", "minimize"]`` trades loss against memory.
        constraints: :func:`memory_constraints` ``(limit)``: each trial's values are set with
            ``trial.set_constraint`` (Optuna >= 5), so any sampler treats configs over the limit as
            infeasible; a trial killed for memory ends PRUNED (infeasible) rather than FAIL.
        **runner_options: any other :class:`trainguard.Runner` keyword (``keras_backend``,
            ``preload``, ``threads``, ``env``, ``sample_interval``...).

    Raises:
        MissingDependencyError: optuna is not installed.
        ConfigError: the objective cannot be sent to a worker, or a bad runner option.
    """

    def __init__(
        self,
        objective: Callable[[Any], Any] | str,
        *,
        workers: int = 1,
        policy: Policy | None = None,
        store: Any = None,
        name: str | None = None,
        on_failure: str = "nan",
        slots: int = _DROP_IN_SLOTS,
        catch: tuple[type[BaseException], ...] = (),
        memory_objective: bool = False,
        constraints: MemoryConstraints | None = None,
        **runner_options: Any,
    ) -> None:
        optuna = _optuna()
        if not isinstance(memory_objective, bool):
            raise ConfigError(f"memory_objective must be True or False, not {memory_objective!r}")
        if constraints is not None and not isinstance(constraints, MemoryConstraints):
            raise ConfigError(
                f"constraints must be trainguard.optuna.memory_constraints('4GB'), not {type(constraints).__name__}"
            )
        if constraints is not None and not hasattr(optuna.trial.Trial, "set_constraint"):
            raise ConfigError(
                f"constraints= needs Optuna >= 5 (trial.set_constraint; this is {optuna.__version__}): give it "
                "to the sampler instead, such as TPESampler(constraints_func=trainguard.optuna.memory_constraints('4GB'))"
            )
        self.constraints = constraints
        self.catch = tuple(catch)
        from trainguard.runner import Runner
        from trainguard.runner import prepare_fn as prepare

        if on_failure not in ("nan", "raise"):
            raise ConfigError(f"on_failure={on_failure!r} must be 'nan' or 'raise'")
        try:
            spec = prepare(objective)
        except ConfigError as err:
            raise ConfigError(
                f"the objective cannot be sent to a worker process: {err}", value=repr(objective)
            ) from err
        policy = default_policy() if policy is None else policy
        if not isinstance(policy, Policy):
            raise ConfigError(f"policy must be a trainguard.Policy, not {type(policy).__name__}")
        if policy.budget_counts_supervisor is None:
            policy = dataclasses.replace(policy, budget_counts_supervisor=True)
        if getattr(policy, "on_oom", None) is not None:
            raise ConfigError(
                "Policy(on_oom=...) cannot shrink an Optuna trial's params (the study chooses them): "
                "leave on_oom out and suggest the batch size in the objective"
            )
        # retries happen here, by re-enqueueing the trial's params in the study; the Runner only
        # runs slots, and a slot's second attempt would not be the same Optuna trial. Its peak
        # model would be fitted on slot numbers: the model is this process's (TrialPeaks), on the
        # trials' Optuna params
        runner = Runner(
            workers=workers,
            policy=dataclasses.replace(policy, retries=0, on_error="continue", predict_peaks=False),
            store=store,
            **runner_options,
        )
        self.policy = policy
        self.workers = workers
        self.on_failure = on_failure
        self.memory_objective = memory_objective
        self._peaks = TrialPeaks(enabled=policy.predict_peaks)
        self.ref = spec.ref
        self._runner = runner
        run_name = name or f"optuna-{spec.ref.rpartition(':')[2]}-{uuid.uuid4().hex[:8]}"
        self._pool = CallPool(
            runner,
            lambda address, authkey: SlotFunction(address, authkey, spec.kind, spec.payload, spec.ref),
            slots,
            run_name,
        )
        self._lock = threading.Lock()
        self._last_peak: dict[int | None, int] = {}
        self.retries_pending = 0
        self.fresh_started = 0
        self.calls = 0
        self.not_started = 0  # trials ended PRUNED for their predicted peak, never sent to a worker
        self._finalizer = weakref.finalize(self, _close_pool, self._pool, runner)

    # -- Optuna calls this ------------------------------------------------------------------------

    def __call__(self, trial: Any) -> Any:
        optuna = _optuna()
        attempt = int(trial.user_attrs.get(ATTR_PREFIX + "attempt", 1))
        with self._lock:
            self.calls += 1
            if ATTR_PREFIX + "retry_of" in trial.user_attrs:
                self.retries_pending = max(0, self.retries_pending - 1)
            else:
                self.fresh_started += 1
        model = self._peaks.start(trial.study)  # fitted on the trials finished before this one
        skip = self._not_to_start(trial, model)
        if skip is not None:
            self._skip(optuna, trial, skip)
        job = self._pool.submit(_TrialJob(trial), _CLOSED)
        job.wait()
        if job.error is not None:
            raise job.error
        result = job.result
        prediction = self._peaks.predict(model, trial.params)
        self._set_memory_attrs(trial, result, prediction)
        measured = result.ok and (result.value or {}).get("kind") == "value"  # a pruned trial stopped early
        status = "ok" if measured else (result.error.status if result.error is not None else "failed")
        self._peaks.observe(trial.params, status, result.peak_rss_bytes, prediction, trial.distributions)
        if self.constraints is not None:
            self.constraints.set_on(trial, _memory_attrs(result, status))
        if result.ok:
            return self._outcome(optuna, trial, result.value, result.peak_rss_bytes)
        return self._failed(trial, result, attempt)

    def _not_to_start(self, trial: Any, model: Any) -> NotStarted | None:
        """Whether ``trial`` is predicted over a limit (``Policy(memory_limit=...)``, the study's
        :func:`memory_constraints`) by its whole interval. Only where there is a limit, the params
        the model uses are drawn here first (:meth:`TrialPeaks.draw`)."""
        from trainguard.units import format_bytes

        limits: dict[str, int] = {}
        if self.policy.memory_limit:
            limits[f"memory_limit={format_bytes(self.policy.memory_limit)}"] = self.policy.memory_limit
        constraints = self.constraints or study_constraints(trial.study)
        if constraints is not None:
            limits[repr(constraints)] = constraints.limit_bytes
        if not limits or model is None or not self._peaks.draw(trial, model):
            return None
        return not_to_start(self._peaks.predict(model, trial.params), limits)

    def _skip(self, optuna: Any, trial: Any, skip: NotStarted) -> None:
        """End ``trial`` unstarted: PRUNED with its prediction as user attributes, infeasible under
        memory constraints; nothing is sent to a worker."""
        attrs = skip.attrs()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if self.constraints is not None:
            self.constraints.set_on(trial, attrs)
        with self._lock:
            self.not_started += 1
        logger.warning("trial %d %s", trial.number, skip.message)
        raise optuna.TrialPruned(f"{skip.message} (trainguard)")

    def _set_memory_attrs(self, trial: Any, result: Any, prediction: Any) -> None:
        """``trainguard_peak_rss_bytes``, ``_growth_bytes``, ``_duration_s``, ``_worker_id``: the
        columns every tracker export writes (one owner: :mod:`trainguard.integrations.columns`);
        ``_peak_gpu_bytes`` where GPU memory was read; ``_predicted_peak_bytes`` with its 95 %
        interval (``_predicted_low_bytes``, ``_predicted_high_bytes``) on every trial (None while
        the peak model cannot say)."""
        from trainguard.integrations.columns import memory_columns

        with self._lock:
            previous = self._last_peak.get(result.worker_id)
            if result.worker_id is not None and result.peak_rss_bytes is not None:
                self._last_peak[result.worker_id] = result.peak_rss_bytes
        columns = memory_columns(result, previous)
        for key in ("peak_rss_bytes", "growth_bytes", "duration_s", "worker_id"):
            if columns.get(key) is not None:
                trial.set_user_attr(ATTR_PREFIX + key, columns[key])
        gpu = getattr(result, "peak_gpu_bytes", None)
        if gpu is not None:
            trial.set_user_attr(ATTR_PREFIX + "peak_gpu_bytes", gpu)
        trial.set_user_attr(ATTR_PREFIX + "predicted_peak_bytes", prediction.peak_bytes)
        trial.set_user_attr(ATTR_PREFIX + "predicted_low_bytes", prediction.low_bytes)
        trial.set_user_attr(ATTR_PREFIX + "predicted_high_bytes", prediction.high_bytes)

    def _outcome(self, optuna: Any, trial: Any, out: dict[str, Any], peak: int | None) -> Any:
        kind = out.get("kind")
        if kind == "pruned":
            raise optuna.TrialPruned(out.get("message") or "")
        directions = len(trial.study.directions) - self.memory_objective
        if self.memory_objective and directions < 1:
            raise ConfigError(
                "memory_objective=True adds the peak as the last value: create the study with one "
                "direction per objective value plus one for memory, such as directions=['minimize', 'minimize']"
            )
        if kind == "none":
            raise ConfigError(
                f"the objective returned None for trial {trial.number}: return a float"
                + (f", or {directions} floats, one per direction" if directions > 1 else "")
            )
        if kind == "bad_value":
            raise ConfigError(
                f"the objective returned a {out['type']} ({out['repr']}) for trial {trial.number}: return a float"
                + (f", or {directions} floats, one per direction" if directions > 1 else "")
            )
        values = out["values"]
        if len(values) != directions:
            raise ConfigError(
                f"the objective returned {len(values)} value{'s' if len(values) != 1 else ''} for trial "
                f"{trial.number} but the study has {directions} direction{'s' if directions != 1 else ''}"
                + (" besides memory's" if self.memory_objective else "")
                + f": return {directions} value{'s' if directions != 1 else ''}, or create the study with "
                "directions=[...] listing one direction per value"
                + (" and one more for memory (memory_objective=True)" if self.memory_objective else "")
            )
        if out.get("nan"):
            trial.set_user_attr(ATTR_PREFIX + "status", "nan")
        if self.memory_objective:
            # no peak read (a trial shorter than one sample): NaN fails it rather than invent one
            return [*values, float(peak) if peak is not None else math.nan]
        return values if out.get("multi") else values[0]

    def _failed(self, trial: Any, result: Any, attempt: int) -> Any:
        error = result.error if result.error is not None else Failure("failed", "")
        status = error.status
        message = error.message or status
        trial.set_user_attr(ATTR_PREFIX + "status", status)
        trial.set_user_attr(ATTR_PREFIX + "message", message[:1000])
        retrying = should_retry(self.policy, status, attempt)
        if retrying:
            study = trial.study
            study.enqueue_trial(
                trial.params,
                user_attrs={ATTR_PREFIX + "attempt": attempt + 1, ATTR_PREFIX + "retry_of": trial.number},
                skip_if_exists=False,
            )
            with self._lock:
                self.retries_pending += 1
            trial.set_user_attr(ATTR_PREFIX + "retried", True)
            logger.warning(
                "trial %d: %s; its params are enqueued again (attempt %d)", trial.number, message, attempt + 1
            )
        if status == "exception" and not retrying:
            # the objective's own exception: as in-process, Optuna fails the trial and re-raises
            # it unless it is in `catch`
            raise _rebuild_exception(error, trial.number, self.catch)
        err = _ERRORS.get(status, WorkerError)(
            f"trial {trial.number}: {message}",
            status=status,
            peak_rss_bytes=result.peak_rss_bytes,
        )
        if self.policy.on_error == "stop" and not retrying:
            raise TrialError(f"{err} (the policy says on_error='stop')", status=status)
        constrained = self.constraints is not None or uses_memory_constraints(trial.study)
        if status in OOM_STATUSES and not retrying and constrained:
            # FAIL would hide it from the sampler (Optuna asks constraints of COMPLETE and PRUNED
            # trials only); PRUNED with its memory attributes makes it infeasible
            logger.warning(
                "trial %d: %s; pruned, infeasible under the study's memory constraints", trial.number, message
            )
            raise _optuna().TrialPruned(f"{message} (infeasible under trainguard.optuna.memory_constraints)")
        if self.on_failure == "raise":
            raise err
        if not retrying:
            logger.warning("trial %d failed: %s", trial.number, message)
        # drop-in: NaN makes Optuna record the trial FAIL and go on, whatever `catch` is
        directions = len(trial.study.directions)
        return math.nan if directions == 1 else [math.nan] * directions

    # -- life cycle -------------------------------------------------------------------------------

    @property
    def runner(self) -> Any:
        """The :class:`trainguard.Runner` that runs the slots (for ``progress()``)."""
        return self._runner

    def close(self) -> None:
        """End the workers (idempotent)."""
        self._finalizer()

    def __enter__(self) -> IsolatedObjective:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"IsolatedObjective({self.ref}, workers={self.workers})"


#: Wrap an Optuna objective so that each call runs it in a supervised trainguard worker (see
#: :class:`IsolatedObjective` for the arguments).
isolated = IsolatedObjective


def _memory_attrs(result: Any, status: str) -> dict[str, Any]:
    """What :func:`memory_constraints` reads of a trial, from its Runner result."""
    return {
        ATTR_PREFIX + "peak_rss_bytes": result.peak_rss_bytes,
        ATTR_PREFIX + "peak_gpu_bytes": getattr(result, "peak_gpu_bytes", None),
        ATTR_PREFIX + "status": None if result.ok else status,
    }


def _close_pool(pool: CallPool, runner: Any) -> None:
    try:
        pool.close()
    finally:
        runner.close()


def _rebuild_exception(error: Failure, number: int, catch: tuple[type[BaseException], ...] = ()) -> Exception:
    """The objective's exception as Optuna's ``catch=`` sees it in-process: a builtin type, a type
    of a module the supervisor has imported (the objective's own), or the ``catch`` class its
    recorded classes name; else a :class:`TrialError` naming the type."""
    from trainguard.integrations._optuna_errors import exception_class, instantiate

    qualified = error.exc_type or ""
    text = error.message or qualified
    name = qualified.rpartition(".")[2]
    detail = text.partition(": ")[2] if text.startswith(f"{name}: ") else text
    cls = exception_class(qualified, list(error.mro or (qualified,)), catch)
    if cls is not None:
        made = instantiate(cls, f"{detail} (trial {number}, raised in a trainguard worker)")
        if made is not None:
            return made
    return TrialError(f"trial {number} raised {text}", exc_type=qualified, traceback=error.traceback)


def optimize(
    study: Any,
    objective: Callable[[Any], Any] | str,
    n_trials: int,
    *,
    workers: int = 1,
    policy: Policy | None = None,
    timeout: float | None = None,
    catch: Iterable[type[Exception]] | type[Exception] = (),
    callbacks: Sequence[Callable[[Any, Any], None]] | None = None,
    show_progress_bar: bool = False,
    store: Any = None,
    name: str | None = None,
    memory_objective: bool = False,
    constraints: MemoryConstraints | None = None,
    **runner_options: Any,
) -> Any:
    """Run ``n_trials`` trials of ``study`` with ``objective`` in supervised trainguard workers.

    The parent asks the sampler and tells the study (any storage works); each objective call runs
    in a worker that is reused, recycled by ``policy`` and killed at its limits. A trial whose
    worker was killed (memory, timeout) or crashed ends FAIL with ``trainguard_status``,
    ``trainguard_message`` and ``trainguard_peak_rss_bytes`` user attributes, and the study goes
    on; ``TrialPruned`` ends it PRUNED; with ``policy.retries`` its params are enqueued again and
    the retry does not count against ``n_trials``. ``workers > 1`` runs trials in parallel.
    Every trial gets ``trainguard_peak_rss_bytes`` (``trainguard_peak_gpu_bytes`` where GPU memory
    is read) and ``trainguard_predicted_peak_bytes``: the peak model's prediction for its params
    from the trials finished before it started (None while the model cannot say: under 5 trials,
    params far outside those seen), with its interval (``_predicted_low_bytes``,
    ``_predicted_high_bytes``). Under ``policy.memory_limit`` or :func:`memory_constraints`, a trial
    whose whole predicted interval is over the limit is not started: the params the model uses are
    drawn here first, and it ends PRUNED (infeasible) with ``trainguard_status="predicted_over_limit"``
    and its prediction, its objective never entered. See :func:`memory_constraints` to make configs
    over a limit infeasible, and ``memory_objective`` to minimise memory as an objective.

    Args:
        study: an ``optuna.Study``.
        objective: as for :func:`isolated`.
        n_trials: trials to run (retries come on top).
        workers: worker processes, and Optuna threads that wait for them.
        policy: a :class:`trainguard.Policy` (default: :func:`default_policy`).
        timeout: stop starting trials after this many seconds (or a duration such as ``"10m"``).
        catch: exception types of the objective that fail a trial without stopping the study.
        callbacks: Optuna callbacks ``f(study, frozen_trial)``, run in the parent.
        show_progress_bar: Optuna's progress bar.
        store, name, memory_objective, constraints, **runner_options: as for :func:`isolated`.

    Returns:
        The study.

    Raises:
        MissingDependencyError: optuna is not installed.
        ConfigError: bad arguments, an objective that cannot be sent to a worker, an objective that
            returns None or a number of values other than the study's directions.
    """
    _check_study(study)
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ConfigError(f"n_trials={n_trials!r} must be a whole number >= 1, such as 30")
    from trainguard.units import parse_duration

    timeout_s = parse_duration(timeout, name="timeout", allow_none=True)
    if isinstance(catch, type):
        catch = (catch,)
    catch = tuple(catch)
    if not all(isinstance(c, type) and issubclass(c, BaseException) for c in catch):
        raise ConfigError("catch must be exception classes, such as (ValueError,)")
    policy = default_policy() if policy is None else policy
    slots = n_trials * (1 + (policy.retries if isinstance(policy, Policy) else 0)) + workers
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with IsolatedObjective(
        objective,
        workers=workers,
        policy=policy,
        store=store,
        name=name,
        on_failure="raise",
        slots=slots,
        catch=catch,
        memory_objective=memory_objective,
        constraints=constraints,
        **runner_options,
    ) as guarded:
        left = n_trials
        while left > 0:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            before = guarded.calls
            study.optimize(
                guarded,
                n_trials=left,
                timeout=remaining,
                n_jobs=workers,
                catch=(*catch, WorkerError, FrameworkOOMError),
                callbacks=callbacks,
                show_progress_bar=show_progress_bar,
            )
            if guarded.calls - before < left:  # stopped early: timeout or study.stop()
                break
            left = max(0, n_trials - guarded.fresh_started) + guarded.retries_pending
    return study
