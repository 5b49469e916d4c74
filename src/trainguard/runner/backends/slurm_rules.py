"""Pure decisions of the Slurm backend: its options, the words for a pilot job's end, Slurm's own
messages. No process, no Slurm call: the backend (``_slurm.py``) feeds these what it read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.runner.policy._limits import EndCause

__all__ = [
    "SlurmOptions",
    "parse_slurm_options",
    "pilot_end",
    "slurm_oom_line",
    "sbatch_refusal",
    "job_name_for",
    "run_owner_key",
    "ctld_hosts",
    "parse_scontrol",
]

#: trainguard's own keys in ``slurm={...}``; every other key is one of submitit's ``slurm_*`` options
OWN_KEYS = ("pilots", "workers_per_pilot", "gpus_per_worker", "folder", "queue_timeout", "driver_host")
#: submitit options given as numbers (the CLI passes strings)
_INT_KEYS = {
    "nodes",
    "ntasks_per_node",
    "cpus_per_task",
    "cpus_per_gpu",
    "gpus_per_node",
    "gpus_per_task",
    "array_parallelism",
    "signal_delay_s",
}
#: submitit options the backend sets itself
_FIXED = {
    "job_name": "the backend names its pilots after the run, to find them again on resume",
    "nodes": "a pilot is one node's supervisor: ask for more workers or pilots instead",
    "ntasks_per_node": "a pilot runs one task, which starts the workers",
}
#: the default time limit of a pilot when none is given (minutes, submitit's unit)
DEFAULT_TIME_MIN = 60


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """``Runner(backend="slurm", slurm={...})`` checked: trainguard's keys and submitit's."""

    #: pilot jobs per run (default: enough for ``workers`` at ``workers_per_pilot`` each)
    pilots: int | None = None
    workers_per_pilot: int = 1
    gpus_per_worker: int = 0
    #: where submitit keeps the pilots' scripts and logs (a folder every node sees)
    folder: str = "trainguard-slurm"
    #: how long a worker may wait for a pilot to start (queue wait), in seconds
    queue_timeout_s: float = 3600.0
    #: the address pilots connect back to (default: this host's name)
    driver_host: str | None = None
    #: submitit's options, without the ``slurm_`` prefix
    submitit: dict[str, Any] = field(default_factory=dict)

    def pilot_count(self, workers: int) -> int:
        return self.pilots if self.pilots is not None else max(1, math.ceil(workers / self.workers_per_pilot))

    def threads_per_worker(self) -> int:
        return max(
            1, int(self.submitit.get("cpus_per_task", self.workers_per_pilot)) // self.workers_per_pilot
        )


def _pairs(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        out: dict[str, Any] = {}
        for item in value:
            key, sep, val = str(item).partition("=")
            if not sep or not key.strip():
                raise ConfigError(
                    f"--slurm {item!r}: write KEY=VALUE, such as --slurm partition=gpu --slurm time=02:00:00"
                )
            key = key.strip()
            if key == "setup":
                out.setdefault("setup", []).append(val)
            else:
                out[key] = val.strip()
        return out
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"slurm= must be a dict such as {{'partition': 'gpu', 'time': '02:00:00'}}, not {type(value).__name__}"
        )
    return dict(value)


def _whole(key: str, value: Any, minimum: int) -> int:
    try:
        number = int(value) if not isinstance(value, bool) else -1
    except (TypeError, ValueError):
        number = -1
    if number < minimum or (isinstance(value, float) and value != number):
        raise ConfigError(
            f"slurm {key}={value!r} must be a whole number >= {minimum}, such as {key}={max(minimum, 1)}"
        )
    return number


def parse_slurm_options(value: Any, known: frozenset[str] | None = None) -> SlurmOptions:
    """``slurm={...}`` (or the CLI's ``KEY=VALUE`` list) checked. ``known`` is the set of options
    submitit's Slurm executor takes (checked when given)."""
    from trainguard.units import parse_duration

    raw = _pairs(value)
    own: dict[str, Any] = {}
    passed: dict[str, Any] = {}
    for key, val in raw.items():
        name = str(key).removeprefix("slurm_")
        if name in OWN_KEYS:
            own[name] = val
        elif name in _FIXED:
            raise ConfigError(f"slurm {name}= is set by trainguard: {_FIXED[name]}")
        else:
            if known is not None and name not in known:
                raise ConfigError(
                    f"slurm {name}= is not an option of submitit's Slurm executor: use one of "
                    f"partition, time, mem, gres, account, qos, constraint, cpus_per_task, setup, ... "
                    f"(or additional_parameters={{'{name.replace('_', '-')}': ...}} for any sbatch flag)"
                )
            passed[name] = _whole(name, val, 0) if name in _INT_KEYS else val
    if "setup" in passed and isinstance(passed["setup"], str):
        passed["setup"] = [passed["setup"]]
    passed.setdefault("time", DEFAULT_TIME_MIN)
    if isinstance(passed["time"], str) and passed["time"].isdigit():
        passed["time"] = int(passed["time"])
    per_pilot = _whole("workers_per_pilot", own.get("workers_per_pilot", 1), 1)
    pilots = _whole("pilots", own["pilots"], 1) if own.get("pilots") is not None else None
    gpus = _whole("gpus_per_worker", own.get("gpus_per_worker", 0), 0)
    passed.setdefault("cpus_per_task", per_pilot)
    if gpus and "gpus_per_node" not in passed and "gres" not in passed:
        passed["gpus_per_node"] = gpus * per_pilot
    queue = float(parse_duration(own.get("queue_timeout", "1h"), name="slurm queue_timeout"))
    if queue <= 0:
        raise ConfigError(
            f"slurm queue_timeout={own['queue_timeout']!r} must be above 0, such as queue_timeout=30m"
        )
    folder = own.get("folder", "trainguard-slurm")
    if not isinstance(folder, str) or not folder.strip():
        raise ConfigError(
            f"slurm folder={folder!r} must be a folder path every node sees, such as folder=~/tg-slurm"
        )
    host = own.get("driver_host")
    return SlurmOptions(pilots, per_pilot, gpus, folder, queue, host if host else None, passed)


def run_owner_key(store_path: str | None, run: str | None) -> str:
    """What owns a run's pilots: its store (the resolved path) and its name, as 10 hex digits. A
    run of the same name in another store has another key, so it never takes these pilots."""
    import hashlib
    import os

    where = os.path.realpath(os.path.expanduser(store_path)) if store_path else ""
    return hashlib.sha256(f"{where}\0{run or ''}".encode()).hexdigest()[:10]


def job_name_for(run: str | None, owner_key: str = "") -> str:
    """The pilots' job name: ``trainguard-<run>-<owner key>``, cut to what squeue shows and safe in
    a script; the key (:func:`run_owner_key`) ties it to the run's store."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", run or "run")[:80]
    return f"trainguard-{base}-{owner_key}" if owner_key else f"trainguard-{base}"


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o ID``'s one line as a mapping (``JobState``, ``Reason``, ``NodeList``...)."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, val = token.partition("=")
        if sep and key not in out:
            out[key] = val
    return out


_STATE_WORDS = {
    "CANCELLED": "was cancelled (scancel)",
    "PREEMPTED": "was preempted",
    "TIMEOUT": "reached its time limit",
    "DEADLINE": "reached its deadline",
    "NODE_FAIL": "lost its node (NODE_FAIL)",
    "BOOT_FAIL": "could not boot its node",
    "FAILED": "failed",
    "COMPLETED": "ended",
    "REQUEUED": "was requeued",
}


def pilot_end(job_id: str, state: str | None, node: str | None, reason: str | None) -> EndCause:
    """The cause recorded for every worker of a pilot job that ended or lost its connection,
    from Slurm's job state (``scontrol``'s ``JobState``, None when Slurm no longer knows it).
    Its ``attempt_status`` is what a trial running on such a worker records (never None here)."""
    where = f" on node {node}" if node else ""
    base = (state or "").split()[0].rstrip("+") if state else ""
    detail: dict[str, Any] = {
        "exitcode": None,
        "slurm_job": job_id,
        "slurm_state": base or None,
        "host": node,
    }
    if base == "OUT_OF_MEMORY":
        detail["why"] = "Slurm's cgroup out-of-memory handler"
        return EndCause(
            "os_oom",
            "os_oom",
            detail,
            f"killed by Slurm's cgroup out-of-memory handler (slurmstepd: oom-kill): pilot job {job_id}{where} "
            "went over its memory (raise slurm mem=, or lower Policy(memory_limit=) below it)",
        )
    # a lost pilot is the cluster's doing: its trials run again elsewhere without using retries
    detail["rerun"] = True
    if base == "NODE_FAIL":
        reason_key = "node_lost"
    else:
        reason_key = "pilot_lost"
    if base in _STATE_WORDS:
        words = _STATE_WORDS[base]
    elif base in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"):
        words = f"lost its connection to the driver (the job is {base})"
    else:
        words = "ended (Slurm no longer knows the job)"
    extra = f"; {reason}" if reason and reason not in ("None", "(null)") else ""
    detail["why"] = words
    return EndCause("crashed", reason_key, detail, f"the Slurm pilot job {job_id}{where} {words}{extra}")


_OOM = re.compile(r"^.*slurmstepd: .*oom[-_ ]kill.*$", re.IGNORECASE | re.MULTILINE)


def slurm_oom_line(text: str) -> str | None:
    """Slurm's own line for a cgroup OOM kill in a job's output (``slurmstepd: error: Detected 1
    oom-kill event(s) in StepId=...``), or None."""
    match = _OOM.search(text)
    return match.group(0).strip() if match else None


def sbatch_refusal(stderr: str) -> str:
    """Slurm's own reason, in one line, from what ``sbatch`` wrote when it refused a job."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    picked: list[str] = []
    for line in lines:
        text = line
        for prefix in ("sbatch: error: ", "sbatch: fatal: ", "allocation failure: "):
            if text.startswith(prefix):
                text = text[len(prefix) :]
        if text.lower() not in (p.lower() for p in picked):
            picked.append(text)
    return "; ".join(picked) or "sbatch gave no reason"


def ctld_hosts(config_text: str) -> list[str]:
    """The controller hosts in ``scontrol show config``'s output (``SlurmctldHost[0] = vm(10.0.0.2)``
    gives ``10.0.0.2``; a bare name gives the name), first first."""
    hosts = []
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().startswith("SlurmctldHost"):
            name, _, addr = value.strip().partition("(")
            hosts.append(addr.rstrip(")").strip() or name.strip())
    return [h for h in hosts if h]
