"""A joblib backend whose every task runs in a guarded, recycled trainguard worker.

::

    import joblib, trainguard.joblib
    trainguard.joblib.register()
    with joblib.parallel_backend("trainguard", n_jobs=2, memory_limit="4GB"):
        GridSearchCV(model, grid, cv=5).fit(X, y)

How it works (see docs/explanation/architecture.md, "Integrations"): joblib hands the backend one
batch at a time, and a batch is one guarded trial (memory sampled, killable, the limits enforced).
joblib's auto-batching applies, as on loky: tasks that take under 0.2 s (a millisecond fit) are
grouped until a batch takes about that long, so the per-trial cost is paid once a batch; a task of
0.2 s or more (any fit worth guarding for memory) stays a batch of one. A batch of several whose
trial is killed has its tasks rerun one a trial, so that only the task over the limit fails
(:mod:`trainguard.integrations._batch_split`). The batch is cloudpickled in the caller (a batch that cannot be sent fails
there, in one line naming the object, before any worker starts) and run by a
:class:`~trainguard.integrations._tasks.TaskPool` in a Runner's supervised workers, kept warm
between calls of the same configuration as loky keeps its workers
(:mod:`trainguard.integrations._warm_pools`). Also with
``n_jobs=1``: joblib would run a one-job call in the caller, so the backend tells joblib it has
two slots and runs the tasks in its one worker (isolation is the point, not parallelism).

A task whose worker is killed (memory limit, timeout, crash) fails as scikit-learn expects a fit
to fail: when the task is scikit-learn's ``_fit_and_score``, the same call is made in the caller
with an estimator whose ``fit`` raises the trainguard error, so scikit-learn itself applies
``error_score`` (NaN and a ``FitFailedWarning`` naming the cause, or the error raised with
``error_score="raise"``). Any other task raises the error (``MemoryLimitError``...) to the caller.
"""

from __future__ import annotations

import copy
import logging
import os
import reprlib
import warnings
from typing import Any

from joblib._parallel_backends import AutoBatchingMixin, ParallelBackendBase

from trainguard.exceptions import ConfigError, TrainguardWarning
from trainguard.integrations._batch_split import OneTask, SplitFuture
from trainguard.integrations._tasks import TaskFuture, TaskPool, dumps_task, make_policy
from trainguard.integrations._warm_pools import keep, pool_key, take
from trainguard.units import format_bytes, parse_size

__all__ = ["TrainguardBackend", "register", "plan_workers", "BACKEND_NAME"]

logger = logging.getLogger(__name__)

BACKEND_NAME = "trainguard"


def plan_workers(
    n_jobs: int | None,
    workers: int | str | None,
    memory_budget_bytes: int | None,
    memory_limit_bytes: int | None,
    cores: int,
    usable_bytes: int | None,
) -> tuple[int | str, int, str | None]:
    """How many workers a Parallel call gets: ``(Runner workers, the count joblib is told, what to
    say once or None)``. Pure: the caller passes the machine's cores and memory.

    ``n_jobs < 0`` (joblib's "all cores") means the workers memory allows, never one per core:
    with ``memory_budget`` the Runner sizes the pool as tasks run (``workers="auto"``), with only a
    per-task ``memory_limit`` it is the usable memory over that limit.
    """
    if n_jobs == 0:
        raise ConfigError(
            "n_jobs=0 has no meaning: give a number of jobs such as 2, or -1 for as many as memory allows"
        )
    if workers is None and (n_jobs is None or n_jobs >= 1):
        count = int(n_jobs or 1)
        return count, max(2, count), None
    if isinstance(workers, int) and not isinstance(workers, bool):
        return workers, max(2, workers), None
    if memory_budget_bytes is None and memory_limit_bytes is None:
        asked = f"n_jobs={n_jobs}" if workers is None else f"workers={workers!r}"
        raise ConfigError(
            f"{asked} asks for as many trainguard workers as memory allows, but nothing says how much: "
            "give memory_budget='8GB' (all workers together) or memory_limit='2GB' (one task) to "
            "parallel_backend('trainguard', ...), or a number of jobs such as n_jobs=2"
        )
    if memory_budget_bytes is not None:
        most = cores
        said = (
            f"n_jobs={n_jobs}: trainguard runs as many workers as memory_budget={format_bytes(memory_budget_bytes)} "
            f"allows, sized as tasks run (at most {most}), not one per core"
        )
        return "auto", max(2, most), said
    assert memory_limit_bytes is not None
    most = max(1, min(cores, (usable_bytes or memory_limit_bytes) // memory_limit_bytes))
    said = (
        f"n_jobs={n_jobs}: trainguard runs {most} worker{'s' if most != 1 else ''}, what "
        f"memory_limit={format_bytes(memory_limit_bytes)} a task allows in "
        f"{format_bytes(usable_bytes) if usable_bytes else 'this machine'}, not one per core"
    )
    return most, max(2, most), said


def _default_gpus() -> list[str] | None:
    """Every GPU NVML sees, one per worker slot round robin, when there are several and the
    environment does not already choose (``CUDA_VISIBLE_DEVICES``)."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    from trainguard.probes.nvml import gpus, nvml_available

    if not nvml_available():
        return None
    seen = gpus()
    return [str(g.index) for g in seen] if len(seen) > 1 else None


# --------------------------------------------------------------------------------------------------
# scikit-learn's failing fit


def _is_fit_and_score(func: Any) -> bool:
    inner = getattr(func, "function", func)
    return getattr(inner, "__name__", "") == "_fit_and_score" and str(
        getattr(inner, "__module__", "")
    ).startswith("sklearn.")


def _raising_fit(error: BaseException) -> Any:
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise error

    return fit


def _failing_estimator(estimator: Any, error: BaseException) -> Any:
    """A copy of ``estimator`` whose ``fit`` raises ``error`` (set_params, tags and splitting
    behave as the original's: it is a subclass instance with the same state)."""
    cls = type(estimator)
    stand_in = type(cls.__name__, (cls,), {"fit": _raising_fit(error), "__module__": cls.__module__})
    out = copy.copy(estimator)
    out.__class__ = stand_in
    return out


def failed_fits(
    items: list[tuple[Any, tuple[Any, ...], dict[str, Any]]], error: BaseException
) -> list[Any] | None:
    """What a batch of scikit-learn fits returns when their worker was killed: each
    ``_fit_and_score`` called here with an estimator whose ``fit`` raises ``error``, so that
    scikit-learn applies ``error_score``. None when the batch holds other tasks."""
    if not items or not all(_is_fit_and_score(func) and args for func, args, _ in items):
        return None
    return [func(_failing_estimator(args[0], error), *args[1:], **kwargs) for func, args, kwargs in items]


# --------------------------------------------------------------------------------------------------
# naming what cannot be sent


def _short(obj: Any) -> str:
    short = reprlib.Repr()
    short.maxstring = short.maxother = 60
    return short.repr(obj)


def _unsendable(obj: Any) -> str | None:
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as err:  # noqa: BLE001 - pickling raises anything
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
    return None


def _on_gpu(obj: Any) -> str | None:
    """A torch module or tensor on a CUDA device (it would load in the worker on another device
    or not at all): where it is, else None."""
    for candidate in (obj, getattr(obj, "module_", None), getattr(obj, "module", None)):
        params = getattr(candidate, "parameters", None)
        if callable(params) and type(candidate).__module__.startswith("torch"):
            for p in params():
                if getattr(p, "is_cuda", False):
                    return str(getattr(p, "device", "cuda"))
        if getattr(candidate, "is_cuda", False) is True:
            return str(getattr(candidate, "device", "cuda"))
    return None


def describe_unsendable(items: list[tuple[Any, tuple[Any, ...], dict[str, Any]]]) -> str | None:
    """One line naming the first object of a batch that cannot go to a worker, else None."""
    for func, args, kwargs in items:
        named = [(f"argument {i}", a) for i, a in enumerate(args)] + [
            (f"argument {k}=", v) for k, v in kwargs.items()
        ]
        for label, value in named:
            problem = _unsendable(value)
            if problem is None:
                continue
            get_params = getattr(value, "get_params", None)
            if callable(get_params):
                for name, param in get_params(deep=False).items():
                    inner = _unsendable(param)
                    if inner is not None:
                        return (
                            f"the estimator {type(value).__name__}'s parameter {name}={_short(param)} cannot be "
                            f"sent to a trainguard worker process ({inner})"
                        )
            return f"the {label} {_short(value)} cannot be sent to a trainguard worker process ({problem})"
        if _unsendable(func) is not None:
            return f"the function {_short(func)} cannot be sent to a trainguard worker process"
    return None


def _what(items: list[tuple[Any, tuple[Any, ...], dict[str, Any]]], number: int) -> str:
    """A task's name in errors: "Ridge fit, split 2/5, candidate 3/4", "task 7 (f)" or, for a
    batch of several, "batch 7 (16 tasks: f, g)"."""
    if items and _is_fit_and_score(items[0][0]):
        _, args, kwargs = items[0]
        name = type(args[0]).__name__ if args else "estimator"
        parts = [f"{name} fit"]
        for key, label in (("split_progress", "split"), ("candidate_progress", "candidate")):
            progress = kwargs.get(key)
            if progress:
                parts.append(f"{label} {progress[0] + 1}/{progress[1]}")
        if len(items) > 1:
            parts.append(f"and the {len(items) - 1} other fits of its batch")
        return ", ".join(parts)
    names = sorted({getattr(getattr(f, "function", f), "__name__", "call") for f, _, _ in items}) or ["call"]
    if len(items) > 1:
        return f"batch {number} ({len(items)} tasks: {', '.join(names)})"
    return f"task {number} ({names[0]})"


# --------------------------------------------------------------------------------------------------
# the backend


class TrainguardBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's ``"trainguard"`` backend (see :func:`trainguard.joblib.register` for the arguments)."""

    supports_retrieve_callback = True
    supports_inner_max_num_threads = True
    default_n_jobs = 1

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        *,
        memory_limit: str | int | None = None,
        timeout: str | float | None = None,
        policy: Any = None,
        memory_budget: str | int | None = None,
        workers: int | str | None = None,
        gpus: Any = "auto",
        store: Any = None,
        name: str | None = None,
        **runner_options: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        self.policy = make_policy(policy, memory_limit, timeout)
        self.memory_budget = parse_size(memory_budget, name="memory_budget", allow_none=True)
        if (
            workers is not None
            and workers != "auto"
            and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1)
        ):
            raise ConfigError(f"workers={workers!r} must be a whole number >= 1 such as 2, or 'auto'")
        self.workers = workers
        self.gpus = gpus
        self.store = store
        self.name = name
        self.runner_options = runner_options
        if "threads" not in runner_options and inner_max_num_threads is not None:
            self.runner_options["threads"] = inner_max_num_threads
        self._pool: TaskPool | None = None
        self._key: bytes | None = None
        self._said = False
        self._submitted = 0
        self._plan = None
        self._check_options()

    def _check_options(self) -> None:
        """Build (and throw away) a Runner so that a bad option fails at ``parallel_backend(...)``."""
        from trainguard.runner import Runner

        Runner(workers=1, policy=self.policy, store=None, **self.runner_options).close()

    # -- sizing -----------------------------------------------------------------------------------

    def _planned(self, n_jobs: int | None) -> tuple[int | str, int]:
        from trainguard.probes.host import usable_cores, usable_memory_bytes

        workers, told, said = plan_workers(
            n_jobs,
            self.workers,
            self.memory_budget,
            self.policy.memory_limit,
            usable_cores(),
            usable_memory_bytes(),
        )
        if said is not None and not self._said:
            self._said = True
            warnings.warn(TrainguardWarning(said), stacklevel=4)
        return workers, told

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        # at least 2, like configure(): joblib runs a one-job call (and scikit-learn's searches ask
        # this, not configure) in the caller, and isolation is the point
        _, told = self._planned(n_jobs)
        return told

    def configure(
        self,
        n_jobs: int | None = 1,
        parallel: Any = None,
        prefer: Any = None,
        require: Any = None,
        **kwargs: Any,
    ) -> int:
        # require="sharedmem" never gets here: joblib gives such a call its threading backend
        workers, told = self._planned(n_jobs)
        self.parallel = parallel
        if self._pool is None:
            # the pool the last call with this configuration left warm, else a new one
            self._key = self._pool_key(workers)
            self._pool = take(self._key) or self._open_pool(workers)
        return told

    def _pool_key(self, workers: int | str) -> bytes | None:
        """What a pool built for this call is kept under between calls (None: not kept, as a
        pool that keeps a history under ``store=``/``name=`` is not: one run a call)."""
        if self.store is not None or self.name is not None:
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return pool_key(self.policy, self.memory_budget, workers, self.gpus, visible, self.runner_options)

    def _open_pool(self, workers: int | str) -> TaskPool:
        import dataclasses

        from trainguard.runner import Runner

        gpus = _default_gpus() if self.gpus == "auto" else self.gpus
        runner = Runner(
            workers=workers,
            policy=dataclasses.replace(self.policy, retries=0, on_error="continue"),
            store=self.store,
            memory_budget=self.memory_budget,
            gpus=gpus,
            **self.runner_options,
        )
        return TaskPool(runner, name=self.name)

    # -- tasks ------------------------------------------------------------------------------------

    def submit(self, func: Any, callback: Any = None) -> SplitFuture:
        if self._pool is None:
            self._key = None
            self._pool = self._open_pool(self._planned(getattr(self.parallel, "n_jobs", 1))[0])
        items = list(getattr(func, "items", []))
        pool = self._pool
        future = SplitFuture(
            self._send(func, items), items, lambda i: self._send(OneTask(func, i), [items[i]], pool)
        )
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def _send(self, func: Any, items: list[Any], pool: TaskPool | None = None) -> TaskFuture:
        """``func`` (a batch, or one task of it) pickled and queued on the pool."""
        self._submitted += 1
        what = _what(items, self._submitted)
        try:
            payload = dumps_task(func, what)
        except ConfigError:
            line = describe_unsendable(items) or f"{what} cannot be sent to a trainguard worker process"
            raise ConfigError(
                line + "; pass objects that pickle (module-level functions, no open locks or files)"
            ) from None
        where = describe_unsendable_gpu(items)
        if where is not None:
            raise ConfigError(where)
        target = pool if pool is not None else self._pool
        assert target is not None
        return target.submit_payload(payload, what)

    def retrieve_result_callback(self, future: SplitFuture) -> Any:
        return future.result(failed_fits)

    # -- life cycle -------------------------------------------------------------------------------

    def terminate(self) -> None:
        # the end of a call: the pool is kept warm for the next call with this configuration (its
        # workers ended after 300 s without one, or at exit), as loky keeps its workers
        pool, self._pool = self._pool, None
        if pool is not None:
            keep(self._key, pool)

    def abort_everything(self, ensure_ready: bool = True) -> None:
        # joblib's call when a task raised or the caller was interrupted (Ctrl-C): the tasks still
        # running are stopped as Ctrl-C stops a run, and recorded interrupted, not crashed
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.abort()

    def get_nested_backend(self) -> Any:
        from joblib._parallel_backends import SequentialBackend

        # a task's own joblib calls run inside its worker, in turn
        return SequentialBackend(nesting_level=(self.nesting_level or 0) + 1), None


def describe_unsendable_gpu(items: list[tuple[Any, tuple[Any, ...], dict[str, Any]]]) -> str | None:
    """One line naming an argument of a batch that sits on a GPU (it pickles, but a worker
    would load it onto another device or none), else None."""
    for _, args, kwargs in items:
        for label, value in [*((f"argument {i}", a) for i, a in enumerate(args)), *kwargs.items()]:
            where = _on_gpu(value)
            if where is not None:
                return (
                    f"the {label} {_short(value)} is already on {where}: a trainguard worker gets its own "
                    "device; pass the estimator unfitted or moved to the CPU (.cpu())"
                )
    return None


def register() -> None:
    """Register the ``"trainguard"`` joblib backend (idempotent)."""
    from joblib import register_parallel_backend

    register_parallel_backend(BACKEND_NAME, TrainguardBackend)
