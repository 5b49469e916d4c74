"""Dispatch: one trial handed to an idle worker, sized first (a remembered fitted size, the peak
model's), its attempt recorded, and sent as the worker's ``trial`` message.

The loop picks the trial and takes it off its queue; :func:`start_trial` says whether the worker
took it (False: the sampler killed the worker at the budget in between, and the loop puts the
trial back at the head of its queue).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.runner._config import RunConfig
    from trainguard.runner.session._pool import Pool
    from trainguard.runner.session._predict import Predictions
    from trainguard.runner.session._recorder import Recorder
    from trainguard.runner.session._records import Attempt, WorkerRecord
    from trainguard.runner.session._recovery import Recovery
    from trainguard.runner.session._stages import Stages

__all__ = ["start_trial", "trial_message"]


def trial_message(
    run: Attempt, *, seed: int | None, staged: dict[str, Any], config: RunConfig
) -> dict[str, Any]:
    """The ``trial`` message a worker gets for ``run``.

    Args:
        run: the attempt (its params as sized).
        seed: the trial's seed (None: none).
        staged: the staged trial's checkpoint fields (empty when it is not staged).
        config: the run's settings (cleanup, census).

    Returns:
        The message.
    """
    return {
        "op": "trial",
        "index": run.index,
        "attempt": run.attempt,
        "key": 0,
        "params": run.sent_params,
        "mixed_precision": run.mixed_precision,
        "seed": seed,
        **staged,
        "cleanup": config.cleanup,
        "census": config.census,
    }


def start_trial(
    *,
    pool: Pool,
    recorder: Recorder,
    recovery: Recovery,
    predictions: Predictions,
    stages: Stages,
    config: RunConfig,
    data: Any,
    worker: WorkerRecord,
    run: Attempt,
    seed: int | None,
) -> bool:
    """Size ``run``, hand it to ``worker`` and send it.

    Args:
        pool: the pool (the worker's record, under its lock).
        recorder: the store writes (the attempt's start).
        recovery: a remembered fitted size.
        predictions: the peak model's size, and the trial's start.
        stages: a staged trial's checkpoint folders.
        config: the run's settings.
        data: the run's shared data (None: none).
        worker: the idle worker.
        run: the attempt, taken off the queue.
        seed: the trial's seed.

    Returns:
        True when the worker took it; False when it was killed at the budget in between (the
        trial waits for another worker).
    """
    recovery.apply_fitted_size(run)
    predictions.apply_size(run)
    run.started_mono = time.monotonic()
    with pool.lock:
        if worker.kill is not None:  # killed in between: the trial waits for another worker
            return False
        worker.trial = run
        worker.state = "busy"
        worker.trial_peak_rss = worker.cur_rss or 0
        worker.trial_peak_gpu = None
        worker.kill = None
    worker.handle.trial_started()
    recorder.start_attempt(run.index, run.attempt, worker.worker_id)
    predictions.started(run)
    staged = stages.message(worker, run, data)
    try:
        worker.handle.send(trial_message(run, seed=seed, staged=staged, config=config))
    except OSError:
        pass  # it died; the EOF on its pipe reports the death with this trial attached
    return True
