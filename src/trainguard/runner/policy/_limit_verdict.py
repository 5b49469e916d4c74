"""The limit verdict, pure and in one place: from one sample of a running trial's tree, whether to
kill it now and whether to raise memory pressure on it.

Every supervisor of a trial asks this module, with the same numbers, the same question: the local
session's sampler (:mod:`trainguard.runner.session._sampling`) and the node-local agent of the Ray
and Slurm backends (:class:`~trainguard.runner.backends.ray.SlotAgent`, which the Slurm pilot
runs). So a trial is killed at the same point, with the same message, wherever it runs.

What it decides, in order of precedence:

- The hard limits (:func:`check_limits`): ``memory_limit`` against what the tree is charged (its
  anonymous and shared memory, tmpfs files included, not its reclaimable file-backed pages:
  :mod:`trainguard.process.charge`, when the sample's split was read; its RSS otherwise), then
  ``gpu_memory_limit``, then ``timeout``.
- The soft limit: a trial under pressure since ``raised_s`` that has not checkpointed within
  ``pressure_grace`` is killed (status ``killed_memory``); a trial not yet under pressure is put
  under it when :func:`~trainguard.runner.policy._pressure.decide_pressure` says so (the caller
  raises ``ctx.under_pressure`` in the worker and keeps the :class:`PressureSince` for the next
  sample).

No process, no clock, no file: the caller reads the tree and the time and carries out the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trainguard.runner.policy._limits import KillDecision
from trainguard.runner.policy._pressure import PressureDecision, decide_pressure, grace_expired
from trainguard.units import format_bytes, format_bytes_apart, format_duration

if TYPE_CHECKING:
    from trainguard.process.charge import MemorySplit
    from trainguard.runner.policy import Policy

__all__ = [
    "LimitReading",
    "PressureSince",
    "LimitVerdict",
    "limit_verdict",
    "pressure_verdict",
    "check_limits",
    "split_words",
    "is_grace_kill",
]


@dataclass(frozen=True, slots=True)
class LimitReading:
    """One sample of a running trial's tree, as its supervisor read it.

    ``rss_bytes`` is the tree's RSS (or its USS where shared data is charged privately);
    ``memory`` its split by kind and the tmpfs memory it holds, where it was read (None: the RSS is
    what the memory limit counts); ``gpu_bytes`` its GPU memory (None: unknown); ``elapsed_s`` the
    seconds since the trial started; ``rate_bytes_per_s`` the RSS's growth over the last seconds
    (:func:`~trainguard.runner.policy.growth_rate`, None: no trend yet); ``now_s`` the monotonic
    time of the sample (for ``pressure_grace``).
    """

    rss_bytes: int
    gpu_bytes: int | None = None
    elapsed_s: float | None = None
    memory: MemorySplit | None = None
    rate_bytes_per_s: float | None = None
    now_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PressureSince:
    """Pressure raised on the running trial: when (monotonic seconds) and why, in words."""

    raised_s: float
    message: str


@dataclass(frozen=True, slots=True)
class LimitVerdict:
    """What the supervisor does after one sample.

    ``kill``: kill the tree now (None: let it run); ``pressure``: raise pressure on the trial now
    (None: none new); ``counted_bytes`` what ``memory_limit`` counted and ``counted`` that in words
    (which kinds of memory were counted and which not).
    """

    kill: KillDecision | None
    pressure: PressureDecision | None
    counted_bytes: int
    counted: str

    @property
    def kills(self) -> bool:
        """Whether the trial is killed now."""
        return self.kill is not None


def split_words(split: MemorySplit) -> str:
    """What a memory figure counted and what it did not, in words:
    ``"anonymous 40.0 MiB + shmem/tmpfs 600.0 MiB counted; file-backed 12.0 MiB not counted"``.

    Args:
        split: the tree's memory by kind.

    Returns:
        The words.
    """
    parts = [f"anonymous {format_bytes(split.anon_bytes)}"]
    if split.shared_bytes:
        parts.append(f"shmem/tmpfs {format_bytes(split.shared_bytes)}")
    words = " + ".join(parts) + " counted"
    if split.file_bytes:
        words += f"; file-backed {format_bytes(split.file_bytes)} not counted (reclaimable)"
    return words


def check_limits(
    policy: Policy,
    *,
    rss_bytes: int | None,
    gpu_bytes: int | None,
    elapsed_s: float | None,
    memory: MemorySplit | None = None,
) -> KillDecision | None:
    """Whether a running trial must be killed now at a hard limit, from one sample of its tree.

    Args:
        policy: the limits.
        rss_bytes: the tree's RSS (None: unread).
        gpu_bytes: its GPU memory (None: unknown).
        elapsed_s: seconds since the trial started (None: unknown).
        memory: the sample's split by kind, when read: the memory limit then counts anonymous and
            shared memory (shmem, tmpfs files), not file-backed pages
            (:mod:`trainguard.process.charge`).

    Returns:
        The kill, or None.
    """
    counted = memory.counted_bytes if memory is not None else rss_bytes
    limits: tuple[tuple[Literal["killed_memory", "killed_gpu_memory"], int | None, int | None, str], ...] = (
        ("killed_memory", policy.memory_limit, counted, "memory_limit: tree RSS"),
        ("killed_gpu_memory", policy.gpu_memory_limit, gpu_bytes, "gpu_memory_limit: GPU memory"),
    )
    for status, limit, value, words in limits:
        if limit is not None and value is not None and value > limit:
            message = "killed at {} {} > {}".format(words, *format_bytes_apart(value, limit))
            if status == "killed_memory" and memory is not None:
                return KillDecision(status, limit, value, f"{message} ({split_words(memory)})", memory)
            return KillDecision(status, limit, value, message)
    if policy.timeout is not None and elapsed_s is not None and elapsed_s > policy.timeout:
        return KillDecision(
            "timeout",
            policy.timeout,
            elapsed_s,
            f"killed at timeout: trial ran {elapsed_s:.1f} s > {policy.timeout:g} s",
        )
    return None


def pressure_verdict(
    policy: Policy, reading: LimitReading, *, pressure: PressureSince | None
) -> tuple[PressureDecision | None, KillDecision | None]:
    """The soft limit's part of :func:`limit_verdict`: pressure to raise now, or the kill of a trial
    whose ``pressure_grace`` ran out (never both; neither without ``soft_limit``).

    Args:
        policy: its ``soft_limit``, ``memory_limit``, ``pressure_horizon`` and ``pressure_grace``.
        reading: the sample (its RSS, growth rate and time).
        pressure: the pressure already raised on this trial, or None.

    Returns:
        ``(pressure raised now or None, kill or None)``.
    """
    soft = policy.soft_limit
    if soft is None:
        return None, None
    soft_bytes = int(soft)
    if pressure is not None:
        grace = None if policy.pressure_grace is None else float(policy.pressure_grace)
        if not grace_expired(pressure.raised_s, reading.now_s, grace):
            return None, None
        return None, KillDecision(
            "killed_memory",
            float(soft_bytes),
            float(reading.rss_bytes),
            f"killed under memory pressure: no checkpoint within pressure_grace="
            f"{format_duration(grace)} after {pressure.message}",
        )
    raised = decide_pressure(
        rss_bytes=reading.rss_bytes,
        soft_limit=soft_bytes,
        memory_limit=policy.memory_limit,
        rate_bytes_per_s=reading.rate_bytes_per_s,
        horizon_s=float(policy.pressure_horizon),
    )
    return raised, None


def limit_verdict(
    policy: Policy, reading: LimitReading, *, pressure: PressureSince | None = None
) -> LimitVerdict:
    """Kill the running trial now or not, and raise pressure on it or not, from one sample.

    A hard limit wins over the grace's end (its message says which limit); pressure raised by the
    same sample is reported with a kill too (the trial is told, then killed, as a trial that
    crosses both limits between two samples is).

    Args:
        policy: the limits.
        reading: the sample.
        pressure: the pressure already raised on this trial (None: none yet).

    Returns:
        The verdict.
    """
    raised, grace_kill = pressure_verdict(policy, reading, pressure=pressure)
    hard = check_limits(
        policy,
        rss_bytes=reading.rss_bytes,
        gpu_bytes=reading.gpu_bytes,
        elapsed_s=reading.elapsed_s,
        memory=reading.memory,
    )
    if reading.memory is not None:
        counted_bytes, counted = reading.memory.counted_bytes, split_words(reading.memory)
    else:
        counted_bytes, counted = reading.rss_bytes, "tree RSS counted (not split by kind)"
    return LimitVerdict(hard or grace_kill, raised, counted_bytes, counted)


def is_grace_kill(policy: Policy, kill: KillDecision | None) -> bool:
    """Whether ``kill`` is the soft limit's: pressure was raised and ``pressure_grace`` ran out.

    Read from the kill's fields, never its words, so that it holds wherever the verdict was made
    (the local sampler, or a Ray or Slurm node's agent, whose kill reaches the driver as status,
    limit, value and message): :func:`pressure_verdict` kills with ``killed_memory`` at the soft
    limit, and a ``memory_limit`` kill is at the hard limit, which ``soft_limit`` must be under.

    Args:
        policy: its ``soft_limit`` (None: no soft limit, so no grace kill).
        kill: the kill, or None (the worker died of something else).

    Returns:
        True for a kill at the end of the grace.
    """
    if kill is None or policy.soft_limit is None or kill.status != "killed_memory":
        return False
    return int(kill.limit) == int(policy.soft_limit)
