"""Kills and endings, pure: the record of a kill (:class:`KillDecision`; the decision itself is
:mod:`trainguard.runner.policy._limit_verdict`'s), and why a worker ended (its exit status and what
the supervisor knew) in words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainguard.process import signal_name

if TYPE_CHECKING:
    from trainguard.process.charge import MemorySplit

__all__ = ["KillDecision", "EndCause", "classify_end"]


@dataclass(frozen=True, slots=True)
class KillDecision:
    """Kill the trial's process tree now. ``status`` is the attempt status to record; ``memory``
    the tree's memory by kind at a ``memory_limit`` kill, where the backend read it."""

    status: Literal["killed_memory", "killed_gpu_memory", "killed_budget", "timeout"]
    limit: float
    value: float
    message: str
    memory: MemorySplit | None = None


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
