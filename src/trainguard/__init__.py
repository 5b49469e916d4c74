"""trainguard: memory-safe repeated training of deep-learning models.

``import trainguard`` is cheap and imports no framework: the public names below are loaded on
first use (PEP 562), and torch, tensorflow, jax and keras are only touched when already imported
or explicitly asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainguard._version import __version__
from trainguard.exceptions import (
    CheckpointError,
    ConfigError,
    DiskFullError,
    DoesNotFitError,
    FrameworkOOMError,
    FunctionChangedWarning,
    LeakError,
    MemoryLimitError,
    MissingDependencyError,
    SchemaVersionError,
    SharedDataError,
    StoreError,
    TrainguardError,
    TrialError,
    TrialTimeoutError,
    UnitError,
    WorkerCrashedError,
    WorkerError,
)
from trainguard.units import format_bytes, parse_duration, parse_size

# public name -> module that defines it, imported on first attribute access
_LAZY = {
    "scope": "trainguard.scope",
    "ScopeReport": "trainguard.scope",
    "Survivor": "trainguard.scope",
    "Sampler": "trainguard.process.sampler",
    "Timeline": "trainguard.process.sampler",
    "census": "trainguard.probes.census",
    "Census": "trainguard.probes.census",
    "tree_memory": "trainguard.process",
    "leakcheck": "trainguard.leaks",
    "LeakReport": "trainguard.leaks",
    "Runner": "trainguard.runner",
    "Policy": "trainguard.runner",
    "Shrink": "trainguard.runner",
    "Command": "trainguard.runner",
    "Device": "trainguard.runner",
    "RayBackend": "trainguard.runner",
    "SlurmBackend": "trainguard.runner",
    "compare": "trainguard.comparison",
    "Comparison": "trainguard.comparison",
    "find_batch_size": "trainguard.fitting",
    "FitResult": "trainguard.fitting",
    "probing": "trainguard.fitting",
    "TrialResult": "trainguard.runner",
    "Failure": "trainguard.runner",
    "share": "trainguard.runner",
    "SharedData": "trainguard.runner",
    "TrialContext": "trainguard.runner",
    "isolated": "trainguard.guarded",
}

# Imported eagerly (they are light): the submodule trainguard.scope would otherwise shadow the
# function trainguard.scope as soon as anything imported the module, and the package
# trainguard.report the function trainguard.report (its __init__ imports only the standard library).
from trainguard.report import report  # noqa: E402
from trainguard.scope import ScopeReport, Survivor, scope  # noqa: E402, F401 (in __all__ via _LAZY)

__all__ = [
    "__version__",
    "ConfigError",
    "DoesNotFitError",
    "CheckpointError",
    "DiskFullError",
    "SharedDataError",
    "FrameworkOOMError",
    "FunctionChangedWarning",
    "LeakError",
    "MemoryLimitError",
    "MissingDependencyError",
    "SchemaVersionError",
    "StoreError",
    "TrainguardError",
    "TrialError",
    "TrialTimeoutError",
    "UnitError",
    "WorkerCrashedError",
    "WorkerError",
    "format_bytes",
    "parse_duration",
    "parse_size",
    "report",
    "load_ipython_extension",
    *_LAZY,
]


# the integrations (each a thin public face over trainguard.integrations) and the framework
# cleanup, reached as attributes after ``import trainguard`` alone (``trainguard.optuna.optimize``,
# ``trainguard.lightning.MemoryCallback``, ``trainguard.frameworks.cleanup()``): each is imported on
# first use and imports its framework only when used
_SUBMODULES = (
    "optuna",
    "keras",
    "frameworks",
    "torch",
    "joblib",
    "keras_tuner",
    "mlflow",
    "lightning",
    "transformers",
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"trainguard.{name}")
    if name == "host_memory":  # deprecated: it was tree_memory under a second name
        import warnings

        warnings.warn(
            "trainguard.host_memory is deprecated: it is trainguard.tree_memory, use that",
            DeprecationWarning,
            stacklevel=2,
        )
        name = "tree_memory"
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'trainguard' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext trainguard``: registers the ``%%trainguard`` cell magic (a cell in a guarded worker).

    Args:
        ipython: the IPython shell that loads the extension.
    """
    from trainguard.notebook import load_ipython_extension as load

    load(ipython)


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only; listed in __all__ via _LAZY
    from trainguard.comparison import Comparison, compare  # noqa: F401
    from trainguard.fitting import FitResult, find_batch_size, probing  # noqa: F401
    from trainguard.guarded import isolated  # noqa: F401
    from trainguard.leaks import LeakReport, leakcheck  # noqa: F401
    from trainguard.probes.census import Census, census  # noqa: F401
    from trainguard.process import tree_memory  # noqa: F401
    from trainguard.process.sampler import Sampler, Timeline  # noqa: F401
    from trainguard.runner import (  # noqa: F401
        Command,
        Device,
        Failure,
        Policy,
        RayBackend,
        Runner,
        Shrink,
        SlurmBackend,
        TrialResult,
    )
