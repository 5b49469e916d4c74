"""What a run hands back: each trial's :class:`TrialResult`, progress snapshots, the default run name."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from trainguard._outcome import TrialOutcome
from trainguard.outcomes import plain_record
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.store import TrialRecord

__all__ = ["TrialResult", "RunProgress", "WorkerProgress", "default_run_name", "stats_message"]


@dataclass(frozen=True, slots=True)
class TrialResult(TrialOutcome):
    """The outcome of one trial.

    ``status`` is ``"ok"`` or ``"failed"``; for a failure ``error`` is a frozen :class:`Failure`
    (None for ``ok``): its ``status`` is the last attempt's cause (``exception``, ``framework_oom``,
    ``crashed``, ``os_oom``, ``killed_memory``, ``killed_gpu_memory``, ``timeout``,
    ``not_serializable``...), with its ``message`` and, for an exception, ``exc_type`` and
    ``traceback`` (``result.error.message``). ``attempts`` counts every attempt, earlier sessions'
    included.
    ``ran_with`` holds the params the last attempt ran with when out-of-memory recovery changed
    them (a smaller batch size), else None.
    ``reused`` is True for a result an earlier session of the same run stored: it was not run again.
    ``seed`` is the seed the trial ran with (``Runner(seed=...)``), the same on every attempt.
    ``predicted_peak_bytes`` is the peak the peak model predicted before its last attempt started
    (None while the model knows too little; see ``Policy(predict_peaks=...)``).
    ``peak_gpu_bytes`` is the last attempt's sampled GPU memory peak (None where none was read).
    """

    ran_with: dict[str, Any] | None = None
    reused: bool = False
    seed: int | None = None
    predicted_peak_bytes: int | None = None
    peak_gpu_bytes: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (``trainguard run --json``).

        Returns:
            Every field as plain JSON values.
        """
        return plain_record(self)

    @classmethod
    def from_record(cls, rec: TrialRecord) -> TrialResult:
        """A finished trial an earlier session stored (``reused``: it is not run again).

        Args:
            rec: the stored trial.

        Returns:
            The result, marked ``reused``.
        """
        outcome = {f.name: getattr(rec, f.name) for f in fields(TrialOutcome)}
        return cls(**outcome, reused=True, seed=rec.seed)


@dataclass(frozen=True, slots=True)
class WorkerProgress:
    worker_id: int
    slot: int
    pid: int | None
    state: str
    rss_bytes: int | None
    trials_done: int
    trial_index: int | None
    recycles: int


@dataclass(frozen=True, slots=True)
class RunProgress:
    """A snapshot of a running ``map`` for progress displays (safe to take from any thread)."""

    name: str
    total: int
    done: int
    failed: int
    running: int
    elapsed_s: float
    eta_s: float | None
    workers: tuple[WorkerProgress, ...]
    recycles: int


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def stats_message(index: int, stats: dict[str, Any]) -> str:
    """The words of a trial_stats event: a Node worker's tf.memory() and heap at the trial's end."""
    parts = []
    tf = stats.get("tfjs")
    if isinstance(tf, dict):
        parts.append(f"tf.memory() {tf.get('numTensors')} tensors, {format_bytes(tf.get('numBytes'))}")
    node = stats.get("node")
    if isinstance(node, dict):
        parts.append(
            f"heapUsed {format_bytes(node.get('heapUsed'))}, external {format_bytes(node.get('external'))}"
        )
    return f"trial {index} stats" + (": " + "; ".join(parts) if parts else "")


def default_run_name(fn_ref: str, params: list[dict[str, Any]]) -> str:
    """``"<function>-<hash of fn ref and params>"``: the same call gets the same name, so it resumes.

    Args:
        fn_ref: the function's reference (``"module:function"``).
        params: the trials' params.

    Returns:
        The run's name.
    """
    digest = hashlib.sha1(
        f"{fn_ref}\n{_canonical_json(params)}".encode("utf-8", "surrogatepass")
    ).hexdigest()[:10]
    if fn_ref.startswith("cmd:"):
        # a command: named after the script it runs (or the program), e.g. "cmd-train.js"
        import shlex

        try:
            words = shlex.split(fn_ref[4:])
        except ValueError:
            words = fn_ref[4:].split()
        files = [w for w in words[1:] if not w.startswith("-") and "." in os.path.basename(w)]
        short = "cmd-" + os.path.basename(files[0] if files else (words[0] if words else "run"))
    else:
        short = fn_ref.rpartition(":")[2].replace("<", "").replace(">", "") or "run"
    return f"{short}-{digest}"
