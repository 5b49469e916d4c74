"""One frozen run configuration, built and validated once by :class:`~trainguard.runner.Runner`.

The session reads it (pool size, sampling, limits, seeds), the store keeps :meth:`RunConfig.stored`
with the run, and each worker's bootstrap is :meth:`RunConfig.bootstrap` (what a worker needs
before its first import). Before this record the same options were written three times: the
Runner's arguments, a session config, and an untyped worker dict repeating eight of them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.runner._gpu_config import GpuBudgetConfig

__all__ = ["RunConfig"]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything a run needs besides the policy, the store and the function (all validated)."""

    workers: int
    threads: int
    base_env: Mapping[str, str]
    gpu_slots: tuple[str, ...] | None
    preload: tuple[str, ...]
    sample_interval_s: float
    uss: bool = False
    census: bool = False
    cleanup: bool = False
    start_timeout_s: float = 180.0
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
    # the workers' environment as asked (kept with the run; the values are in base_env already)
    keras_backend: str | None = None
    allocator: str | None = None
    malloc_trim_threshold: int | None = None
    tf_custom_gradients: bool = True
    #: a Device's settings, applied in each worker before any framework initialises
    device: Mapping[str, Any] | None = None
    #: the GPU budget per device (Runner(gpu_memory_budget=...)): slots and caps per GPU
    gpu_budget: GpuBudgetConfig | None = None

    def stored(self) -> dict[str, Any]:
        """The configuration the store keeps with the run (the keys earlier releases wrote)."""
        return {
            "threads": self.threads,
            "memory_budget": self.memory_budget_bytes,
            "workers_auto": self.auto_workers,
            "keras_backend": self.keras_backend,
            "allocator": self.allocator,
            "malloc_trim_threshold": self.malloc_trim_threshold,
            "preload": list(self.preload),
            "gpus": list(self.gpu_slots) if self.gpu_slots is not None else None,
            "cleanup": self.cleanup,
            "tf_custom_gradients": self.tf_custom_gradients,
            "sample_interval_s": self.sample_interval_s,
            "max_result_bytes": self.max_result_bytes,
            "tree_tracking": self.tree_tracking,
            "device": dict(self.device) if self.device is not None else None,
            "gpu_memory_budget": self.gpu_budget.stored() if self.gpu_budget is not None else None,
        }

    def bootstrap(self, *, threads: int, preload: tuple[str, ...] = ()) -> dict[str, Any]:
        """What one worker reads before its first import (JSON, in its environment): where to
        import from, what to preload, its threads, which log lines to quiet, its result cap."""
        from trainguard import frameworks

        return {
            "sys_path": [p for p in sys.path if p],
            "preload": list(dict.fromkeys((*self.preload, *preload))),
            "threads": threads,
            "quiet_modules": list(frameworks.QUIET_MODULES),
            "max_result_bytes": self.max_result_bytes,
            "device": dict(self.device) if self.device is not None else None,
            "tf_custom_gradients": self.tf_custom_gradients,
        }
