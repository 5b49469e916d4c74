"""Recovery: what follows a failed attempt. A retry (``Policy.retries``), the next smaller attempt
of an out-of-memory trial (``Policy(on_oom=Shrink(...))``), the rerun of a trial killed at the
run's memory budget, and the sizes that fitted (remembered for later trials and runs).

:class:`Recovery` owns the sizes that fitted in this session and returns the next attempt; the
loop queues it. The rules themselves are the pure ones of :mod:`trainguard.runner.policy`
(``should_retry``, ``shrink_step``, ``start_at``). A remembered size applies under
:func:`device_key`: only on the same machine, with the same visible GPUs and under the same hard
limits (also the key of ``find_batch_size``).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainguard.outcomes import OOM_STATUSES, Failure
from trainguard.runner.policy import params_without, should_retry, shrink_step, start_at
from trainguard.runner.session._records import LOST_RERUNS_PER_TRIAL, Attempt
from trainguard.units import format_bytes

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import Finish, WorkerRecord

__all__ = ["device_key", "Recovery"]

logger = logging.getLogger(__name__)


def device_key(
    *,
    memory_limit: int | None,
    gpu_memory_limit: int | None,
    gpus: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """``"host=NAME;gpus=0;memory_limit=1000000000;gpu_memory_limit=-"``.

    ``gpus`` are the worker slots' ``CUDA_VISIBLE_DEVICES`` values when the runner sets them; else
    the environment's value is used ("-" when unset, "none" when set empty).

    Args:
        memory_limit: the memory limit in bytes, or None.
        gpu_memory_limit: the GPU memory limit in bytes, or None.
        gpus: the worker slots' ``CUDA_VISIBLE_DEVICES`` values, or None.
        env: the environment to read ``CUDA_VISIBLE_DEVICES`` from when ``gpus`` is None.

    Returns:
        The key the fitted sizes are remembered under.
    """
    env = os.environ if env is None else env
    if gpus is not None:
        visible = "|".join(gpus) or "none"
    else:
        value = env.get("CUDA_VISIBLE_DEVICES")
        visible = "-" if value is None else (value or "none")
    return (
        f"host={socket.gethostname()};gpus={visible};"
        f"memory_limit={memory_limit if memory_limit is not None else '-'};"
        f"gpu_memory_limit={gpu_memory_limit if gpu_memory_limit is not None else '-'}"
    )


class Recovery:
    """Decides and records what follows each attempt; owns the sizes that fitted this session."""

    def __init__(
        self, *, policy: Policy, recorder: Recorder, fn_ref: str, run_name: str, device: str
    ) -> None:
        self.policy = policy
        self.recorder = recorder
        self._lost_reruns: dict[int, int] = {}
        self.fn_ref = fn_ref
        self.run_name = run_name
        self.device = device
        # sizes that fitted in this session, by params without the shrunk keys
        self._fitted: dict[str, int] = {}

    def failure(
        self, run: Attempt, status: str, error: Failure | None, worker_id: int | None
    ) -> Failure | None:
        """The stored failure of an attempt: its cause plus the attempt, the worker and, under
        ``on_oom``, the sizes it ran with (a new record; the cause is not changed)."""
        if error is None:
            return None
        failure = replace(error, attempt=run.attempt, worker_id=worker_id)
        if self.policy.on_oom is not None and status in OOM_STATUSES:
            failure = replace(failure, ran_with=self._sized_keys(run.sent_params))
        return failure

    def next_attempt(self, worker: WorkerRecord | None, end: Finish) -> tuple[Attempt | None, Failure | None]:
        """The attempt that follows ``end``'s (None: the trial is finished) and the failure to keep
        when it is finished (``end.error``, or for an OOM give-up the same saying why no smaller
        size was tried)."""
        run, status, error, peak = end.run, end.status, end.error, end.peak
        rule = self.policy.on_oom
        if rule is not None and status in OOM_STATUSES:
            smaller, error = self._shrink(worker, end)
            if smaller is not None:
                return smaller, error
        if status == "ok" and rule is not None and run.attempt_params is not None:
            self._remember(run, peak)
        if status != "ok" and should_retry(self.policy, status, run.session_attempts):
            logger.info("trial %d attempt %d: %s; retrying", run.index, run.attempt, status)
            cause = (error.message if error is not None else "") or status
            where = f" on worker {worker.worker_id}" if worker is not None else ""
            self.recorder.event(
                "retry",
                f"trial {run.index} attempt {run.attempt}{where} ended with {status} ({cause}); "
                f"retrying as attempt {run.attempt + 1}",
                data={"status": status, "message": cause, "attempt": run.attempt},
                worker=worker,
                index=run.index,
            )
            return Attempt(run.index, run.params, run.attempt + 1, run.session_attempts + 1), error
        return None, error

    def rerun_after_loss(
        self, worker: WorkerRecord, run: Attempt, error: Failure, peak: int | None, duration_s: float
    ) -> Attempt | None:
        """A trial whose worker was lost with its cluster job (``detail["rerun"]``: a Slurm pilot
        cancelled, preempted or out of time): the attempt is recorded and the trial runs again
        elsewhere without using ``retries``, up to :data:`LOST_RERUNS_PER_TRIAL` times; then None
        (the retry policy decides)."""
        done = self._lost_reruns.get(run.index, 0)
        if done >= LOST_RERUNS_PER_TRIAL:
            return None
        self._lost_reruns[run.index] = done + 1
        failure = replace(error, attempt=run.attempt, worker_id=worker.worker_id)
        self.recorder.finish_attempt(
            run,
            error.status,
            error=failure,
            peak=peak,
            duration_s=duration_s,
        )
        self.recorder.event(
            "rerun",
            f"trial {run.index} attempt {run.attempt} on worker {worker.worker_id} was lost ({error.message}); "
            f"it runs again as attempt {run.attempt + 1} (no retry used)",
            data={"status": error.status, "message": error.message, "attempt": run.attempt},
            worker=worker,
            index=run.index,
        )
        return _same_attempt_again(run)

    def rerun_after_budget_kill(
        self, worker: WorkerRecord, run: Attempt, *, alone: bool, workers: int
    ) -> Attempt:
        """The next attempt of a trial killed at the memory budget: the pool's doing, not the
        trial's, so no retry is used (the caller checks :data:`BUDGET_KILLS_PER_TRIAL`)."""
        where = (
            f"its worker's tree alone, grown by {worker.trials_done} earlier trials, crossed it"
            if alone
            else "beside other work"
        )
        self.recorder.event(
            "retry",
            f"trial {run.index} attempt {run.attempt} on worker {worker.worker_id} ended with killed_budget "
            f"(killed at the memory budget, {where}); running again as attempt {run.attempt + 1} "
            f"with at most {workers} worker{'s' if workers != 1 else ''} at once "
            "(a kill at the budget uses no retries)",
            data={"status": "killed_budget", "attempt": run.attempt, "workers": workers},
            worker=worker,
            index=run.index,
        )
        return _same_attempt_again(run, budget_kills=run.budget_kills + 1)

    # -- sizes ------------------------------------------------------------------------------------

    def _sized_keys(self, params: Any) -> dict[str, Any]:
        rule = self.policy.on_oom
        assert rule is not None
        keys = [rule.key] + ([rule.accumulate] if rule.accumulate else [])
        return {k: params.get(k, 1 if k == rule.accumulate else None) for k in keys}

    def _fitted_key(self, params: dict[str, Any]) -> str:
        rule = self.policy.on_oom
        assert rule is not None
        return params_without(params, [rule.key, rule.accumulate])

    def apply_fitted_size(self, run: Attempt) -> None:
        """Start a trial at the size remembered for its params (this session's, else the store's)
        when that is below the size it asks for."""
        rule = self.policy.on_oom
        if rule is None or run.sized or run.attempt_params is not None:
            return
        run.sized = True
        params_key = self._fitted_key(run.params)
        size = self._fitted.get(params_key)
        source = "this run"
        if size is None and rule.remember:
            try:
                record = self.recorder.fitted_size(self.fn_ref, params_key, self.device, rule.key)
            except Exception:  # noqa: BLE001 - a missing memory only costs an OOM attempt
                logger.exception("could not read the remembered size")
                record = None
            if record is not None:
                size, source = record.size, f"the store ({record.source})"
                self._fitted[params_key] = size
        asked = int(run.params[rule.key])
        if size is None or size >= asked:
            return
        run.attempt_params = start_at(rule, run.params, size)
        size = int(run.attempt_params[rule.key])
        sized = self._sized_keys(run.attempt_params)
        words = ", ".join(f"{k}={v}" for k, v in sized.items())
        self.recorder.event(
            "oom_start",
            f"trial {run.index} starts at {words} (asked {rule.key}={asked}): the size remembered from {source}",
            data={"asked": asked, "size": size, "ran_with": sized, "source": source},
            index=run.index,
        )

    def _shrink(self, worker: WorkerRecord | None, end: Finish) -> tuple[Attempt | None, Failure | None]:
        """The next, smaller attempt of an out-of-memory trial; None (and the failure saying why)
        when there is none."""
        run, status, error, peak = end.run, end.status, end.error, end.peak
        rule = self.policy.on_oom
        assert rule is not None
        current = run.sent_params
        step = None
        if run.oom_attempts + 1 < rule.max_attempts:
            step = shrink_step(rule, current, mixed_precision_on=run.mixed_precision)
        cause = (error.message if error is not None else "") or status
        sized = self._sized_keys(current)
        words = ", ".join(f"{k}={v}" for k, v in sized.items())
        where = f" on worker {worker.worker_id}" if worker is not None else ""
        peak_words = f" at peak {format_bytes(peak)}" if peak else ""
        if step is None:
            why = (
                f"{rule.key}={current[rule.key]} is the minimum"
                if int(current[rule.key]) <= rule.minimum
                else f"max_attempts={rule.max_attempts} out-of-memory attempts reached"
            )
            if error is not None:
                error = replace(error, message=f"{error.message or status} (out of memory at {words}; {why})")
            self.recorder.event(
                "oom_give_up",
                f"trial {run.index} attempt {run.attempt}{where} ran out of memory ({status}) with {words}"
                f"{peak_words}: {why}, no smaller size to try",
                data={"status": status, "ran_with": sized, "peak_bytes": peak, "attempt": run.attempt},
                worker=worker,
                index=run.index,
            )
            return None, error
        self.recorder.event(
            "oom_shrink",
            f"trial {run.index} attempt {run.attempt}{where} ran out of memory ({status}: {cause}) with {words}"
            f"{peak_words}; {step.message}",
            data={
                "status": status,
                "attempt": run.attempt,
                "ran_with": sized,
                "peak_bytes": peak,
                "next": self._sized_keys(step.params),
                "effective_batch": step.effective_batch,
                "previous_effective_batch": step.previous_effective_batch,
                "mixed_precision": step.mixed_precision,
            },
            worker=worker,
            index=run.index,
        )
        logger.info("trial %d attempt %d: %s; %s", run.index, run.attempt, status, step.message)
        smaller = Attempt(
            run.index,
            run.params,
            run.attempt + 1,
            run.session_attempts,  # an OOM shrink does not use the retries budget
            attempt_params=step.params,
            mixed_precision=step.mixed_precision,
            oom_attempts=run.oom_attempts + 1,
            sized=True,
        )
        return smaller, error

    def _remember(self, run: Attempt, peak: int | None) -> None:
        rule = self.policy.on_oom
        assert rule is not None and run.attempt_params is not None
        size = int(run.attempt_params[rule.key])
        params_key = self._fitted_key(run.params)
        if self._fitted.get(params_key) == size:
            return
        self._fitted[params_key] = size
        sized = self._sized_keys(run.attempt_params)
        if rule.remember:
            self.recorder.remember_size(
                self.fn_ref,
                params_key,
                self.device,
                rule.key,
                size,
                peak_rss_bytes=peak,
                source="shrink",
                detail={
                    "asked": run.params[rule.key],
                    "ran_with": sized,
                    "run": self.run_name,
                    "index": run.index,
                },
            )
        words = ", ".join(f"{k}={v}" for k, v in sized.items())
        self.recorder.event(
            "oom_fitted",
            f"trial {run.index} fitted at {words} (asked {rule.key}={run.params[rule.key]}"
            f"{', peak ' + format_bytes(peak) if peak else ''}); later trials and runs start there",
            data={
                "ran_with": sized,
                "asked": run.params[rule.key],
                "peak_bytes": peak,
                "device": self.device,
            },
            index=run.index,
        )


def _same_attempt_again(run: Attempt, *, budget_kills: int = 0) -> Attempt:
    """The next attempt of ``run`` when the run, not the trial, ended it (a lost worker, a kill at
    the memory budget): the same params and size, no retry used (``session_attempts`` unchanged)."""
    return Attempt(
        run.index,
        run.params,
        run.attempt + 1,
        run.session_attempts,
        attempt_params=run.attempt_params,
        mixed_precision=run.mixed_precision,
        oom_attempts=run.oom_attempts,
        sized=True,
        budget_kills=budget_kills,
    )
