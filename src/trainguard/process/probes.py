"""The built-in sampler probes: cheap readers that return a number (or None) each call."""

from __future__ import annotations

import logging
from collections.abc import Callable

import psutil

from trainguard.exceptions import ConfigError
from trainguard.process.tree import ProcessTree, statm_rss_bytes

logger = logging.getLogger(__name__)

ProbeFn = Callable[[], "int | float | None"]


def build_probes(spec: object, tree: ProcessTree) -> dict[str, ProbeFn]:
    """Turn a ``probes=`` argument into ``{name: callable}``; the built-in probes read ``tree``
    (its owner closes it).

    Raises:
        ConfigError: an unknown built-in name, a non-callable, or a spec of the wrong type.
    """
    if spec is None:
        spec = ("rss_bytes",)
    if isinstance(spec, str):
        spec = (spec,)
    builtins = _builtins(tree)
    out: dict[str, ProbeFn] = {}
    if isinstance(spec, dict):
        for name, fn in spec.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"probe names must be non-empty strings, not {name!r}", value=repr(name))
            if isinstance(fn, str) and fn in builtins:
                out[name] = builtins[fn]
            elif callable(fn):
                out[name] = fn
            else:
                raise ConfigError(
                    f"probe {name!r} must be a callable returning a number, or a built-in name "
                    f"({', '.join(sorted(builtins))}), not {type(fn).__name__}",
                    value=repr(fn),
                )
        if not out:
            raise ConfigError("probes={} is empty: give at least one probe, e.g. probes=['rss_bytes']")
        return out
    if isinstance(spec, (list, tuple)):
        for name in spec:
            if name not in builtins:
                raise ConfigError(
                    f"unknown probe {name!r}: use one of {', '.join(sorted(builtins))} "
                    "or a dict {name: callable}",
                    value=repr(name),
                )
            out[name] = builtins[name]
        if not out:
            raise ConfigError("probes=[] is empty: give at least one probe, e.g. probes=['rss_bytes']")
        return out
    raise ConfigError(
        f"probes= must be a list of built-in names or a dict {{name: callable}}, not {type(spec).__name__}",
        value=repr(spec),
    )


def _builtins(tree: ProcessTree) -> dict[str, ProbeFn]:
    """The built-in probes. The tree's memory is :class:`trainguard.process.tree.ProcessTree`'s reading
    (so a fork that has not called exec yet is charged what it owns, not its parent's pages again)."""
    pid = tree.root_pid

    def rss_bytes() -> int | None:
        reading = tree.read()
        return None if reading is None else reading[0]

    def process_rss_bytes() -> int | None:
        return statm_rss_bytes(pid)

    def uss_bytes() -> int | None:
        reading = tree.read(uss=True)
        return None if reading is None else reading[1]

    def gpu_bytes() -> int | None:
        from trainguard.probes.nvml import gpu_memory_of_pids

        return gpu_memory_of_pids(tree.pids())

    def system_available_bytes() -> int:
        return psutil.virtual_memory().available

    def cgroup_usage_bytes() -> int | None:
        from trainguard.probes.host import cgroup_memory

        cg = cgroup_memory()
        return cg.usage_bytes if cg else None

    return {
        "rss_bytes": rss_bytes,
        "process_rss_bytes": process_rss_bytes,
        "uss_bytes": uss_bytes,
        "gpu_bytes": gpu_bytes,
        "system_available_bytes": system_available_bytes,
        "cgroup_usage_bytes": cgroup_usage_bytes,
    }


BUILTIN_PROBES: tuple[str, ...] = (
    "rss_bytes",
    "process_rss_bytes",
    "uss_bytes",
    "gpu_bytes",
    "system_available_bytes",
    "cgroup_usage_bytes",
)
