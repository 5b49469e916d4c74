"""A pool that runs arbitrary tasks (callables with no arguments) in guarded trainguard workers.

The engine under the joblib backend and the KerasTuner integration. It is the guarded-call
engine's pool (:class:`trainguard.guarded.CallPool`: Runner *slots* in a driver thread, a bridge
that hands each connected slot the next job, shared with ``@isolated``, the notebook cells and the
Optuna integration) handing out cloudpickled tasks; see :mod:`trainguard.integrations._task_worker` for the worker side.

Each task is one Runner trial: it runs in a supervised worker that is reused for the next task,
recycled by the policy, and killed at its limits. A task killed for memory, a timeout or a crash
resolves its :class:`TaskFuture` with the matching :data:`~trainguard.exceptions.FAILURE_ERRORS`
exception (``MemoryLimitError``, ``TrialTimeoutError``, ``WorkerCrashedError``), carrying the
status and the peak; the Runner and the other tasks go on.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from trainguard.exceptions import FAILURE_ERRORS, ConfigError, TrainguardError, WorkerError
from trainguard.guarded import BaseJob, CallPool, send_json
from trainguard.integrations._task_worker import TaskSlot
from trainguard.runner.policy import Policy

__all__ = ["TaskPool", "TaskFuture", "TaskFailure", "dumps_task", "make_policy"]


@dataclasses.dataclass(frozen=True, slots=True)
class TaskFailure:
    """Why a task did not come back: the Runner's failure status and message, and the peak."""

    status: str
    message: str
    peak_rss_bytes: int | None
    worker_id: int | None

    def error(self, what: str) -> TrainguardError:
        """The exception the caller sees: ``MemoryLimitError`` for a memory kill, and so on."""
        cls = FAILURE_ERRORS.get(self.status, WorkerError)
        return cls(f"{what}: {self.message}", status=self.status, peak_rss_bytes=self.peak_rss_bytes)


def dumps_task(task: Any, what: str) -> bytes:
    """``task`` as cloudpickle bytes, or a one-line ``ConfigError`` saying it cannot be sent."""
    import cloudpickle

    try:
        return cloudpickle.dumps(task)
    except Exception as err:  # noqa: BLE001 - pickling raises anything (TypeError, PicklingError...)
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(
            f"{what} cannot be sent to a trainguard worker process: {type(err).__name__}: {detail}; "
            "pass objects that pickle (module-level functions, no open locks, files or GPU tensors)"
        ) from None


def make_policy(policy: Policy | None, memory_limit: Any, timeout: Any) -> Policy:
    """The policy a pool runs with: ``policy``, or one built from ``memory_limit``/``timeout``."""
    if policy is not None:
        if not isinstance(policy, Policy):
            raise ConfigError(f"policy must be a trainguard.Policy, not {type(policy).__name__}")
        if memory_limit is not None or timeout is not None:
            raise ConfigError(
                "give memory_limit=/timeout= or policy=trainguard.Policy(memory_limit=..., timeout=...), not both"
            )
        return policy
    return Policy(memory_limit=memory_limit, timeout=timeout)


class _TaskJob(BaseJob):
    """One task handed to a slot: the pickled task goes out, the pickled reply comes back; the
    future's callbacks fire once the job is done (result in and conversation over, or failed)."""

    def __init__(self, payload: bytes, what: str) -> None:
        super().__init__()
        self.payload = payload
        self.what = what
        self.reply: bytes | None = None
        self.future: TaskFuture | None = None

    def open(self, conn: Connection) -> None:
        send_json(conn, {"op": "task"})
        conn.send_bytes(self.payload)

    def converse(self, conn: Connection) -> None:
        self.reply = conn.recv_bytes()

    def _maybe_done(self) -> None:
        was = self.done.is_set()
        super()._maybe_done()
        if self.done.is_set() and not was and self.future is not None:
            self.future._fire()

    def _fail(self, error: BaseException) -> None:
        was = self.done.is_set()
        super()._fail(error)
        if not was and self.future is not None:
            self.future._fire()


class TaskFuture:
    """The outcome of one submitted task (the shape joblib and ``concurrent.futures`` expect)."""

    def __init__(self, job: _TaskJob) -> None:
        self._job = job
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[TaskFuture], Any]] = []
        self._fired = False

    def done(self) -> bool:
        return self._job.done.is_set()

    def add_done_callback(self, fn: Callable[[TaskFuture], Any]) -> None:
        with self._lock:
            if not self._fired:
                self._callbacks.append(fn)
                return
        fn(self)

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    @property
    def trial(self) -> Any:
        """The Runner's ``TrialResult`` of the slot that ran the task (None if it never ran)."""
        return self._job.result

    @property
    def failure(self) -> TaskFailure | None:
        """Why the worker did not bring the task back (killed, timed out, crashed), else None."""
        result = self._job.result
        if result is None or result.ok:
            return None
        status = result.error.status if result.error is not None else "failed"
        message = (result.error.message if result.error is not None else "") or status
        return TaskFailure(status, message, result.peak_rss_bytes, result.worker_id)

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value; raises the task's own exception, or the failure's error."""
        if not self._job.done.wait(timeout):
            raise TimeoutError(f"the task did not finish within {timeout} s")
        if self._job.error is not None:
            raise self._job.error
        task = self._job
        failure = self.failure
        if failure is not None:
            raise failure.error(task.what)
        if task.reply is None:
            raise WorkerError(
                f"{task.what}: the worker finished but its reply was lost", status="protocol_error"
            )
        outcome, value = pickle.loads(task.reply)
        if outcome == "raised":
            raise value
        return value


class TaskPool(CallPool):
    """Runs submitted tasks in the workers of ``runner`` (a :class:`trainguard.Runner`).

    ``submit_task`` pickles the task at once (a task that cannot be sent fails there, before any
    worker starts) and returns a :class:`TaskFuture`. ``close()`` ends the workers.
    """

    def __init__(self, runner: Any, name: str | None = None, slots: int = 1000) -> None:
        timeout = getattr(runner.policy, "timeout", None)
        super().__init__(
            runner,
            TaskSlot,
            slots,
            name or f"tasks-{uuid.uuid4().hex[:8]}",
            # a slot waiting for the next task ends before the policy's timeout could kill it
            idle_limit_s=None if timeout is None else max(0.5, 0.5 * timeout),
        )

    def submit_task(self, task: Any, what: str) -> TaskFuture:
        """Run ``task()`` in a worker. ``what`` names it in errors ("fold 3 of GridSearchCV").

        Raises:
            ConfigError: the task cannot be pickled (one line naming ``what``).
        """
        return self.submit_payload(dumps_task(task, what), what)

    def submit_payload(self, payload: bytes, what: str) -> TaskFuture:
        """Like :meth:`submit_task` with the task already pickled."""
        job = _TaskJob(payload, what)
        future = TaskFuture(job)
        job.future = future
        self.submit(job, "this trainguard task pool is closed: start a new one")
        return future

    def close(self, timeout_s: float = 30.0) -> None:
        try:
            super().close(timeout_s)
        finally:
            self._runner.close()

    def abort(self) -> None:
        """Stop now (the caller was interrupted): see :meth:`CallPool.abort`; the Runner closed."""
        try:
            super().abort()
        finally:
            self._runner.close()
