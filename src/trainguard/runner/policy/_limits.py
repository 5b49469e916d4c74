"""Hard limits and endings, pure: kill a running trial now (one sample of its tree against the
limits), and why a worker ended (its exit status and what the supervisor knew) in words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainguard.process import signal_name
from trainguard.units import format_bytes, format_bytes_apart

if TYPE_CHECKING:
    from trainguard.process.charge import MemorySplit
    from trainguard.runner.policy import Policy

__all__ = ["KillDecision", "check_limits", "EndCause", "classify_end"]


@dataclass(frozen=True, slots=True)
class KillDecision:
    """Kill the trial's process tree now. ``status`` is the attempt status to record; ``memory``
    the tree's memory by kind at a ``memory_limit`` kill, where the backend read it."""

    status: Literal["killed_memory", "killed_gpu_memory", "killed_budget", "timeout"]
    limit: float
    value: float
    message: str
    memory: MemorySplit | None = None


def split_words(split: MemorySplit) -> str:
    """What a memory figure counted and what it did not, in words:
    ``"anonymous 40.0 MiB + shmem/tmpfs 600.0 MiB counted; file-backed 12.0 MiB not counted"``."""
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
    """Whether a running trial must be killed now, from one sample of its tree.

    ``memory``: the sample's split by kind, when read: the memory limit then counts anonymous and
    shared memory (shmem, tmpfs files), not file-backed pages (:mod:`trainguard.process.charge`).
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


# --------------------------------------------------------------------------------------------------
# why a worker ended


@dataclass(frozen=True, slots=True)
class EndCause:
    """Why a worker process ended while (or without) running a trial.

    ``attempt_status`` is what the trial's attempt records (None when no trial was running),
    ``worker_reason`` the store's word for the worker's end, ``detail`` the numbers behind it and
    ``message`` one line for people.
    """

    attempt_status: str | None
    worker_reason: str
    detail: dict[str, Any]
    message: str


_KILL_REASON = {
    "killed_memory": "killed_memory",
    "killed_gpu_memory": "killed_gpu_memory",
    "killed_budget": "killed_budget",
    "timeout": "killed_timeout",
}


def classify_end(
    returncode: int | None,
    *,
    in_trial: bool,
    kill: KillDecision | None = None,
    oom_kills_before: int | None = None,
    oom_kills_after: int | None = None,
) -> EndCause:
    """Say why a worker ended, from its exit status and what the supervisor knows.

    Args:
        returncode: ``Popen.returncode`` (negative: killed by that signal).
        in_trial: whether a trial was running.
        kill: the supervisor's own kill of this worker, if it made one.
        oom_kills_before / oom_kills_after: the cgroup's ``oom_kill`` counter at the worker's start and
            now (None when unreadable); a rise means the OS OOM killer acted in this cgroup.
    """
    detail: dict[str, Any] = {"exitcode": returncode}
    status: str | None
    if kill is not None:
        reason = _KILL_REASON[kill.status]
        if kill.status == "timeout":
            detail.update(timeout_s=kill.limit, elapsed_s=round(kill.value, 3))
        elif kill.status == "killed_gpu_memory":
            detail.update(gpu_bytes=int(kill.value), limit_bytes=int(kill.limit))
        elif kill.status == "killed_budget":
            detail.update(sum_bytes=int(kill.value), budget_bytes=int(kill.limit))
        else:
            detail.update(rss_bytes=int(kill.value), limit_bytes=int(kill.limit))
            if kill.memory is not None:
                detail.update(
                    anon_bytes=kill.memory.anon_bytes,
                    shared_bytes=kill.memory.shared_bytes,
                    file_bytes=kill.memory.file_bytes,
                    tmpfs_bytes=kill.memory.tmpfs_bytes,
                )
        detail["signal"] = "SIGKILL"
        return EndCause(kill.status if in_trial else None, reason, detail, kill.message)
    oom_rose = (
        oom_kills_before is not None and oom_kills_after is not None and oom_kills_after > oom_kills_before
    )
    sigkill = returncode in (-9, 137)
    if sigkill:
        detail["signal"] = "SIGKILL"
        if oom_rose:
            detail["oom_kill_count"] = oom_kills_after
            message = "killed by the OS out-of-memory killer (SIGKILL; the cgroup's oom_kill count rose)"
            return EndCause("os_oom" if in_trial else None, "os_oom", detail, message)
        evidence = (
            "no oom_kill in the cgroup" if oom_kills_after is not None else "cgroup oom_kill unreadable"
        )
        message = (
            f"killed by SIGKILL from outside trainguard: the OS OOM killer or another process ({evidence})"
        )
        detail["why"] = "SIGKILL from outside trainguard"
        status = "crashed" if in_trial else None
        return EndCause(status, "crashed", detail, message)
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        detail["signal"] = name
        words = {
            "SIGSEGV": "segmentation fault",
            "SIGABRT": "aborted",
            "SIGBUS": "bus error",
            "SIGFPE": "arithmetic fault",
        }
        extra = f" ({words[name]})" if name in words else ""
        return EndCause(
            "crashed" if in_trial else None, "crashed", detail, f"crashed: killed by {name}{extra}"
        )
    if in_trial:
        return EndCause(
            "crashed", "crashed", detail, f"the worker exited with code {returncode} in the middle of a trial"
        )
    if returncode == 0:
        return EndCause(None, "exited", detail, "the worker exited")
    return EndCause(None, "crashed", detail, f"the worker exited with code {returncode}")
