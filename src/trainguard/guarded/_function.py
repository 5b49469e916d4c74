"""``@trainguard.isolated``: calling the function runs it in a guarded worker and returns its value."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["IsolatedFunction", "isolated", "make_policy"]


def make_policy(policy: Any, memory_limit: Any, timeout: Any) -> tuple[Any, float | None]:
    """The Runner policy and the per-call timeout in seconds from ``isolated``'s arguments."""
    from trainguard.runner import Policy
    from trainguard.units import parse_duration

    if policy is not None and not isinstance(policy, Policy):
        raise ConfigError(f"policy must be a trainguard.Policy, not {type(policy).__name__}")
    if policy is not None and memory_limit is not None:
        raise ConfigError("give memory_limit= or policy=Policy(memory_limit=...), not both")
    if policy is None:
        policy = Policy(memory_limit=memory_limit)
    timeout_s = parse_duration(timeout, name="timeout", allow_none=True)
    if policy.timeout is not None:
        if timeout_s is not None:
            raise ConfigError("give timeout= or policy=Policy(timeout=...), not both")
        timeout_s = float(policy.timeout)
    if timeout_s is not None and timeout_s <= 0:
        raise ConfigError(f"timeout={timeout!r} must be positive, such as '30m'")
    import dataclasses

    # the timeout is the engine's, per call (see trainguard.guarded._calls); retries would run a
    # call twice behind the caller's back
    return dataclasses.replace(policy, timeout=None, retries=0), timeout_s


class IsolatedFunction:
    """A function whose every call runs in a guarded worker (see :func:`isolated`)."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        if not callable(fn):
            raise ConfigError(f"@isolated needs a function, not {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.__trainguard_wrapped__ = fn
        self._options = options
        self._policy, self._timeout_s = make_policy(
            options.pop("policy", None), options.pop("memory_limit", None), options.pop("timeout", None)
        )
        self._engine: Any = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from trainguard import _nesting

        if _nesting.role() is not None:  # already inside a worker: run it here
            return self.__trainguard_wrapped__(*args, **kwargs)
        from trainguard.guarded._send import pickle_inputs

        name = getattr(self.__trainguard_wrapped__, "__name__", "function")
        labels = {f"argument {i + 1} of {name}()": value for i, value in enumerate(args)}
        labels.update({f"argument {key}= of {name}()": value for key, value in kwargs.items()})
        import cloudpickle

        pickle_inputs(labels, f"function {name}")  # one line naming what cannot go, before anything runs
        payload = cloudpickle.dumps((args, kwargs))
        with self._lock:
            if self._engine is None:
                from trainguard.guarded._calls import GuardedCalls

                self._engine = GuardedCalls(
                    self.__trainguard_wrapped__,
                    what=f"{name}()",
                    policy=self._policy,
                    timeout_s=self._timeout_s,
                    **self._options,
                )
            engine = self._engine
        return engine.call(payload)

    @property
    def runner(self) -> Any:
        """The Runner behind the warm worker (None before the first call)."""
        return None if self._engine is None else self._engine.runner

    def close(self) -> None:
        """End the warm worker (idempotent); the next call starts a fresh one."""
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def __reduce__(self) -> Any:
        # sent to a worker (a function by value that calls this one): there it is the plain function
        return (_plain, (self.__trainguard_wrapped__,))

    def __repr__(self) -> str:
        return (
            f"isolated({getattr(self.__trainguard_wrapped__, '__qualname__', self.__trainguard_wrapped__)!r})"
        )


def _plain(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def isolated(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Run each call of ``fn`` in a fresh guarded worker process and return its value.

    ``@trainguard.isolated`` or ``@trainguard.isolated(memory_limit="4GB", timeout="30m")``. The
    arguments go to the worker by value (cloudpickle; one that cannot go is named in one line
    before anything runs), the value comes back by value, and what the function prints shows
    as it runs. Successive calls reuse the warm worker until the policy recycles it, as the
    Runner's workers are; ``close()`` ends it. Works on functions of ``__main__``, a notebook or
    a module.

    Args:
        fn: the function (or leave it out to give options).
        memory_limit: the worker tree's hard memory limit (``"4GB"``): over it, the call raises
            :class:`trainguard.MemoryLimitError`.
        timeout: a call's time limit (``"30m"``): past it, :class:`trainguard.TrialTimeoutError`.
        policy: a :class:`trainguard.Policy` instead (recycling, limits).
        device, keras_backend, threads, env, preload, store, ...: any :class:`trainguard.Runner`
            keyword.

    Raises (from a call):
        the function's own exception, as the same type where it can be rebuilt (the worker's
        traceback in its notes); ``MemoryLimitError``, ``TrialTimeoutError``,
        ``WorkerCrashedError`` when the worker was killed or died; ``ConfigError`` for an
        argument or value that cannot be sent.

    Returns:
        The guarded function (or, called with options only, a decorator that makes one).
    """
    if fn is None:
        return lambda f: IsolatedFunction(f, dict(options))
    return IsolatedFunction(fn, dict(options))
