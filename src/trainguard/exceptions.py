"""The exceptions trainguard raises, in one tree.

::

    TrainguardError                   base of everything below
    ├── ConfigError (ValueError)      a bad argument, size, duration, name or file given by the user
    │   └── UnitError                 a size or duration string that does not parse ("4 potatoes")
    ├── MissingDependencyError (ImportError)
    │                                 an optional part is used but its package is absent; names the pip install
    ├── LeakError                     a scope() grew past its limits; carries the ScopeReport
    ├── StoreError                    the results store cannot be opened or written
    │   ├── SchemaVersionError        the store was written by another schema version
    │   ├── RunLockedError            another live supervisor runs this run of this store (pid, host, since)
    │   └── DiskFullError             the disk under the store or a run's checkpoints is full: the run stopped
    ├── WorkerError                   a worker process ended without a result
    │   ├── WorkerCrashedError        it died of a signal or a non-zero exit (segfault, SIGKILL, OS OOM killer)
    │   ├── MemoryLimitError          trainguard killed it at the memory limit
    │   └── TrialTimeoutError         trainguard killed it at the trial timeout
    ├── TrialError                    the trial function raised; carries the remote traceback
    ├── FrameworkOOMError             the framework reported out-of-memory (TF, torch, MemoryError)
    ├── DoesNotFitError               find_batch_size: even the smallest size did not fit under the limit
    ├── SharedDataError               share(): no room for the arrays in /dev/shm nor the temporary folder
    └── CheckpointError               a staged trial's ctx.checkpoint/restore cannot do what was asked

    TrainguardWarning (UserWarning)   warnings.warn() categories, filterable with the warnings module
    ├── FunctionChangedWarning        a resumed run reuses results stored by another version of its function
    ├── SettingsChangedWarning        a run is resumed with other settings than its last session's
    └── NoGpuWarning                  GPU-only options given where no GPU is seen: they have no effect

Every error carries structured attributes (``pid``, ``exitcode``, ``signal``, ``limit_bytes``...) and
survives pickling, so it can cross a process boundary unchanged. Messages are one line that says what
was wrong and how to fix it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "TrainguardError",
    "ConfigError",
    "UnitError",
    "MissingDependencyError",
    "LeakError",
    "StoreError",
    "SchemaVersionError",
    "RunLockedError",
    "DiskFullError",
    "WorkerError",
    "WorkerCrashedError",
    "MemoryLimitError",
    "TrialTimeoutError",
    "TrialError",
    "FrameworkOOMError",
    "DoesNotFitError",
    "SharedDataError",
    "CheckpointError",
    "TrainguardWarning",
    "FunctionChangedWarning",
    "SettingsChangedWarning",
    "NoGpuWarning",
]


class TrainguardError(Exception):
    """Base class of every trainguard error.

    Subclasses pass their structured attributes as keyword arguments; they are kept on the
    instance and restored on unpickling (``__reduce__``), like psutil's errors.
    """

    def __init__(self, message: str = "", **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        self._attrs = dict(attrs)
        for key, value in attrs.items():
            setattr(self, key, value)

    def __reduce__(self):  # noqa: D105 - pickling support
        return (_rebuild, (type(self), self.message, self._attrs))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[TrainguardError], message: str, attrs: dict[str, Any]) -> TrainguardError:
    err = cls.__new__(cls)
    TrainguardError.__init__(err, message, **attrs)
    return err


class ConfigError(TrainguardError, ValueError):
    """A bad argument or input file. The message names the bad value and a valid example."""


class UnitError(ConfigError):
    """A size or duration string that does not parse."""


class MissingDependencyError(TrainguardError, ImportError):
    """An optional dependency is missing. ``package`` and ``extra`` name what to install."""

    def __init__(self, message: str = "", **attrs: Any) -> None:
        TrainguardError.__init__(self, message, **attrs)


def missing(package: str, purpose: str, extra: str | None = None) -> MissingDependencyError:
    """Build the standard error for an absent optional package."""
    # trainguard is installed from a clone, not a package index: the extra's command runs there
    hint = (
        f"`pip install -e '.[{extra}]'` in your trainguard clone (or `pip install {package}`)"
        if extra
        else f"`pip install {package}`"
    )
    return MissingDependencyError(
        f"{purpose} needs the package {package!r}, which is not installed: run {hint}",
        package=package,
        extra=extra,
    )


class LeakError(TrainguardError):
    """A ``scope()`` exceeded ``max_survivor_bytes`` or ``max_rss_growth``. ``report`` holds the ScopeReport."""


class StoreError(TrainguardError):
    """The results store cannot be opened, read or written."""


class SchemaVersionError(StoreError):
    """The store's schema version differs from the one this trainguard writes."""


class RunLockedError(StoreError):
    """Another supervisor, still running, holds this run of this store: ``pid``, ``host``, ``since``."""


class DiskFullError(StoreError):
    """The file system under the store or a run's checkpoints is full (``path``, ``free_bytes``):
    the run stopped with status ``disk_full``; it resumes once space is freed."""


class WorkerError(TrainguardError):
    """A worker process ended without delivering a result."""


class WorkerCrashedError(WorkerError):
    """The worker died: a signal (``signal``), a non-zero ``exitcode``, or the OS OOM killer."""


class MemoryLimitError(WorkerError):
    """trainguard killed the worker's process tree when its memory crossed ``limit_bytes``."""


class TrialTimeoutError(WorkerError):
    """trainguard killed the worker when the trial ran past ``timeout_s``."""


class TrialError(TrainguardError):
    """A trial failed and the policy stops the run (``on_error="stop"``), or (Optuna, staged
    trials) the objective's own exception crossed back from a worker.

    ``index`` is the failed trial's, ``status`` its attempt status (``exception``, ``timeout``,
    ``killed_memory``...), ``error`` the trial's :class:`~trainguard.outcomes.Failure` (``message``,
    ``exc_type``, ``traceback`` for an exception); ``Runner.map`` adds ``results`` (what finished). When the worker was killed or
    crashed rather than the function raising, ``__cause__`` is the matching error of
    :data:`FAILURE_ERRORS` (``MemoryLimitError``, ``TrialTimeoutError``...). A rebuilt objective
    exception carries ``exc_type`` and ``traceback`` instead.
    """


class FrameworkOOMError(TrainguardError):
    """The framework ran out of memory (``framework``: tensorflow, torch, python)."""


class DoesNotFitError(TrainguardError):
    """Even the smallest size probed did not fit: ``key``, ``size``, ``peak_bytes``, ``limit_bytes``."""


class SharedDataError(TrainguardError):
    """``share()`` found no room: ``needed_bytes`` and ``free_bytes`` (by folder) say how much."""


class CheckpointError(TrainguardError):
    """A staged trial's checkpoint cannot be written (state not picklable) or restored (none yet)."""


#: The error for each way an attempt fails without the trial function raising, by attempt status
#: (the Runner's ``on_error="stop"`` chains it as the TrialError's cause; Optuna raises it).
FAILURE_ERRORS: dict[str, type[TrainguardError]] = {
    "killed_memory": MemoryLimitError,
    "killed_gpu_memory": MemoryLimitError,
    "killed_budget": MemoryLimitError,
    "os_oom": WorkerCrashedError,
    "crashed": WorkerCrashedError,
    "timeout": TrialTimeoutError,
    "framework_oom": FrameworkOOMError,
}


class TrainguardWarning(UserWarning):
    """Base class of the warnings trainguard issues (``warnings.simplefilter("error", TrainguardWarning)``)."""


class FunctionChangedWarning(TrainguardWarning):
    """A run resumed by name reuses results that an earlier version of its function computed.

    Run again with ``Runner(fresh=True)`` (``trainguard run --fresh``) or under another name to
    compute every trial with the current code.
    """


class SettingsChangedWarning(TrainguardWarning):
    """A run resumed by name runs its remaining trials with other settings than its last session.

    Each trial keeps the settings it ran under (the store records each session's and each attempt's
    session). ``changes`` holds ``(setting, before, after)`` triples, dotted names for nested ones
    (``"policy.memory_limit"``).
    """

    def __init__(self, message: str, changes: tuple[tuple[str, Any, Any], ...] = ()) -> None:
        super().__init__(message)
        self.changes = tuple(changes)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.changes))


class NoGpuWarning(TrainguardWarning):
    """GPU-only options (``Device(tf_memory_growth=...)``, ``gpus=``...) were given on a machine where
    no GPU is seen: they have no effect. ``options`` names them, ``evidence`` says how the absence
    was detected."""

    def __init__(self, message: str, options: tuple[str, ...] = (), evidence: str = "") -> None:
        super().__init__(message)
        self.options = tuple(options)
        self.evidence = evidence

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.options, self.evidence))
