"""Which process tier a worker gets, and what each tier guarantees on this machine.

Tiers (``Runner(tree_tracking=...)``, ``trainguard run --tree-tracking ...``):

- ``"auto"``: Linux: a cgroup v2 where one can be made, always a child subreaper, ``/proc`` reads
  (:mod:`trainguard.process.tree`, `cgroup`, `kill`); macOS and other POSIX systems: ``"portable"``; Windows:
  ``"windows"``.
- ``"cgroup"`` / ``"subreaper"``: the Linux mechanisms, required (Linux only).
- ``"portable"``: psutil only, a process group per worker (:mod:`trainguard.process.portable`).
- ``"windows"``: a Job Object per worker (:mod:`trainguard.process.windows`).

The choice and the refusals are pure functions of the platform's name, so they are tested here for
every platform.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from trainguard.exceptions import ConfigError

__all__ = [
    "TRACKING_CHOICES",
    "resolve_tracking",
    "refuse_linux_only",
    "Guarantee",
    "guarantees",
    "this_machine",
]

TRACKING_CHOICES = ("auto", "cgroup", "subreaper", "portable", "windows")
_NAMES = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}


def _os_name(platform: str) -> str:
    for prefix, name in _NAMES.items():
        if platform.startswith(prefix):
            return name
    return platform


def resolve_tracking(requested: str, platform: str | None = None) -> str:
    """The tier ``requested`` means on ``platform`` (default ``sys.platform``): ``"auto"`` (the
    Linux tier), ``"cgroup"``, ``"subreaper"``, ``"portable"`` or ``"windows"``.

    Raises:
        ConfigError: an unknown name, or a tier this platform does not have, in one line.
    """
    platform = sys.platform if platform is None else platform
    if requested not in TRACKING_CHOICES:
        raise ConfigError(
            f"tree_tracking={requested!r} is unknown: use one of {', '.join(map(repr, TRACKING_CHOICES))}"
        )
    linux, windows = platform.startswith("linux"), platform == "win32"
    if requested == "auto":
        return "auto" if linux else ("windows" if windows else "portable")
    if requested in ("cgroup", "subreaper") and not linux:
        raise ConfigError(
            f"tree_tracking={requested!r} needs Linux ({'cgroup v2' if requested == 'cgroup' else 'a child subreaper'}); "
            f"on {_os_name(platform)} use tree_tracking='auto' (the {'windows' if windows else 'portable'} tier)"
        )
    if requested == "windows" and not windows:
        raise ConfigError(
            f"tree_tracking='windows' needs Windows (Job Objects); on {_os_name(platform)} use 'auto' or 'portable'"
        )
    if requested == "portable" and windows:
        raise ConfigError(
            "tree_tracking='portable' needs POSIX process groups; on Windows use 'auto' (Job Objects)"
        )
    return requested


def refuse_linux_only(feature: str, how: str, platform: str | None = None) -> None:
    """One line refusing a Linux-only ``feature`` (``how`` says what it rests on) elsewhere."""
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        raise ConfigError(f"{feature} works only on Linux ({how}); leave it out on {_os_name(platform)}")


@dataclass(frozen=True, slots=True)
class Guarantee:
    """One guarantee of a tier: ``level`` is ``"exact"``, ``"approximate"`` or ``"missing"``."""

    name: str
    level: str
    how: str


def guarantees(
    tier: str,
    *,
    cgroup: bool = False,
    nvml_per_process: bool = True,
    no_nvml: str | None = None,
    cgroup_at: str | None = None,
    cgroup_kill: bool = True,
) -> list[Guarantee]:
    """What ``tier`` (as :func:`resolve_tracking` returns it) guarantees: tree membership, kill,
    memory cap, peak, GPU memory per process. ``cgroup``: a cgroup v2 can be made here (under
    ``cgroup_at``, with ``cgroup.kill`` where ``cgroup_kill``); ``no_nvml``: why NVML cannot be
    used here (None: it can)."""
    if no_nvml is not None:
        gpu = Guarantee("GPU per process", "missing", f"no NVML: {no_nvml}")
    elif nvml_per_process:
        gpu = Guarantee("GPU per process", "exact", "NVML by pid")
    else:
        gpu = Guarantee("GPU per process", "missing", "NVML has no per-process figures here")
    if tier in ("auto", "cgroup", "subreaper"):
        in_cgroup = cgroup and tier != "subreaper"
        where = f" (under {cgroup_at})" if cgroup_at else ""
        via = f"cgroup v2{where} + child subreaper" if in_cgroup else "child subreaper"
        kill = "cgroup.kill" if cgroup_kill else "SIGKILL to each cgroup member until none is left"
        return [
            Guarantee("tree membership", "exact", f"{via}: detached processes stay in the tree"),
            Guarantee("kill", "exact", kill if in_cgroup else "process group + subreaper walk"),
            Guarantee(
                "memory cap",
                "approximate",
                "sampled every sample_interval, killed when over (not OS-enforced)",
            ),
            Guarantee("peak", "approximate", "highest sample (RSS from /proc, every sample_interval)"),
            gpu,
        ]
    if tier == "portable":
        return [
            Guarantee(
                "tree membership",
                "approximate",
                "psutil children: a process that detaches (double fork, setsid) leaves the tree",
            ),
            Guarantee(
                "kill",
                "approximate",
                "killpg + psutil children: a daemon that left the process group escapes",
            ),
            Guarantee(
                "memory cap",
                "approximate",
                "sampled every sample_interval, killed when over (not OS-enforced)",
            ),
            Guarantee("peak", "approximate", "highest sample (psutil RSS, every sample_interval)"),
            gpu,
        ]
    if tier == "windows":
        return [
            Guarantee(
                "tree membership", "exact", "Job Object: every process the worker starts joins its job"
            ),
            Guarantee("kill", "exact", "TerminateJobObject; kill-on-close when the supervisor dies"),
            Guarantee("memory cap", "exact", "the job's memory limit, enforced by the OS"),
            Guarantee("peak", "exact", "PeakJobMemoryUsed (committed memory)"),
            Guarantee(
                "GPU per process", "approximate", "PDH \\GPU Process Memory(pid_*)\\Dedicated Usage (WDDM)"
            ),
        ]
    raise ValueError(f"unknown tier {tier!r}")


def this_machine() -> dict[str, object]:
    """The tier ``"auto"`` gives here, what it guarantees (exact or approximate) and what this
    platform lacks, as ``trainguard doctor`` shows it."""
    platform = sys.platform
    tier = resolve_tracking("auto", platform)
    missing: list[str] = []
    cgroup = False
    if platform.startswith("linux"):
        from trainguard.process.cgroup import tracking_mechanisms

        mechanisms = tracking_mechanisms()
        cgroup = "cgroup" in mechanisms
        if not cgroup:
            missing.append(
                "a cgroup v2 per worker (needs root or a delegated systemd scope): the subreaper alone keeps trees"
            )
        if "subreaper" not in mechanisms:
            missing.append("the child subreaper")
    else:
        missing.append("cgroup v2, the child subreaper and /proc (Linux only)")
        missing.append(
            "allocator= and malloc_trim_threshold= (glibc's LD_PRELOAD and MALLOC_TRIM_THRESHOLD_)"
        )
    from trainguard.probes.nvml import nvml_absence

    no_nvml = nvml_absence()
    nvml_per_process = platform != "win32"  # WDDM: NVML lists no per-process figures; PDH does
    cgroup_at, cgroup_kill = _tree_cgroup_place() if cgroup else (None, True)
    chosen = guarantees(
        tier,
        cgroup=cgroup,
        nvml_per_process=nvml_per_process,
        no_nvml=no_nvml if platform != "win32" else None,
        cgroup_at=cgroup_at,
        cgroup_kill=cgroup_kill,
    )
    portable = guarantees("portable", no_nvml=no_nvml)
    return {
        "tier": "linux" if tier == "auto" else tier,
        "guarantees": [{"name": g.name, "level": g.level, "how": g.how} for g in chosen],
        "portable": [{"name": g.name, "level": g.level, "how": g.how} for g in portable]
        if tier != "portable" and platform != "win32"
        else None,
        "missing": missing,
    }


def _tree_cgroup_place() -> tuple[str | None, bool]:
    """Where a worker's cgroup v2 is made (this process's cgroup v2 folder), and whether the
    kernel ends a cgroup in one write (``cgroup.kill``, Linux 5.14)."""
    import os

    from trainguard.process.cgroup import TreeCgroup

    try:
        major, minor = (int(p) for p in os.uname().release.split(".")[:2])
        kill = (major, minor) >= (5, 14)
    except (ValueError, AttributeError):
        kill = False
    return TreeCgroup._own_cgroup_dir(), kill
