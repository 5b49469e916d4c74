"""The supervisor's side of a run, cut by the state each part owns.

The data flow of one trial (the loop's thread on the left does all the waiting and every store
write; the watchdog thread on the right reads trees and kills, and nothing else)::

    the loop (_loop)                                              the watchdog (_sampling)
    ================                                              ========================
      params                                                      each sample_interval_s:
        |                                                           read every worker's tree
        v                                                           the limit verdict (policy)
    +-------+  _dispatch   +--------+   result    +------------+    the budget (_pool_budget)
    | queue |------------->| worker |------------>| _trial_end |          |
    +-------+ sized, sent  +--------+  or its     | _deaths    |          |
        ^                      ^       end (EOF)  +------------+          |
        |                      |                        |                 |
        |                      +--------- kill ---------|-----------------+
        |                                               |                 |
        |                                 decision: Rerun | Finish        v
        |                                               v        soft_limit_and_flight
        |   the next attempt (_recovery:         +-----------+   (pressure raised, the
        +----------------------------------------| _outcomes |    last seconds kept)
            a retry, an OOM shrink)              +-----------+
                                                        |
                                                        v
                                             results, yielded to the caller

Only the loop (:mod:`._loop`) holds the queue and waits; every other part returns a decision
(:class:`~._records.Rerun`, :class:`~._records.Finish`, a recycle, an ending plan) that the loop
applies, and no module but the loop reads the session's private state (a test pins both). The
watchdog shares the pool's worker records under the pool's lock; the loop records its kills.

The modules:

- :mod:`._loop`: :class:`Session`: the queue, dispatch, the workers' messages; the only part that waits.
- :mod:`._dispatch`: one trial sized and sent to an idle worker.
- :mod:`._trial_end`: a result message read (the attempt's end), and what becomes of its worker.
- :mod:`._deaths`: a worker's end classified and recorded: rerun, end or nothing; protocol errors.
- :mod:`._budget_kill`: after a kill at the memory budget: rerun, end, or stop the run (pure decision).
- :mod:`._trim`: a worker's answer to ``malloc_trim(0)``: kept or recycled (pure decision).
- :mod:`._outcomes`: each attempt's and trial's end recorded, the results, the counts, the stop.
- :mod:`._ending`: how a session ends (pure plan), a full disk's stop.
- :mod:`._recovery`: retries, OOM shrink and remembered (fitted) sizes: it returns the next attempt.
- :mod:`._pool`: the worker records, spares, reservations, recycles, reaping; its planner.
- :mod:`._pool_budget`: the memory and GPU budgets: admission, budget kills, fewer workers.
- :mod:`._gpu_pool`: the GPU budget's slots, shares and kills.
- :mod:`._predict`: the peak model: predicted peaks, trials not started, sizes.
- :mod:`._stages`: staged trials' checkpoint folders, resumes and exits at a checkpoint.
- :mod:`._sampling`: the watchdog tick (read every tree, the limit verdict, the budget, kill) and
  the samples it keeps until the loop stores them.
- :mod:`.soft_limit_and_flight`: the soft limit and the flight recorder (a worker's last seconds).
- :mod:`._recorder`: every store write and event of the run.
- :mod:`._interrupts`: Ctrl-C, SIGTERM and SIGHUP raised between passes of the loop, never inside.
- :mod:`._eta`: the progress's time left.
- :mod:`._records` (an attempt, a worker record, the parts' decisions) and :mod:`._results` (what
  a run hands back).
"""

from __future__ import annotations

from trainguard.runner.session._loop import Session
from trainguard.runner.session._predict import PeakForecaster
from trainguard.runner.session._recovery import device_key
from trainguard.runner.session._results import RunProgress, TrialResult, WorkerProgress, default_run_name

__all__ = [
    "Session",
    "PeakForecaster",
    "TrialResult",
    "RunProgress",
    "WorkerProgress",
    "default_run_name",
    "device_key",
]
