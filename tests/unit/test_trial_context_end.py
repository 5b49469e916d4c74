"""A worker's trial context is current while its trial runs, and not after it."""

from __future__ import annotations

from trainguard.runner.worker import process
from trainguard.runner.worker.context import current_context


def test_the_context_is_current_during_its_trial_and_none_after_it():
    seen = []

    def trial(params, ctx):
        seen.append(current_context() is ctx)
        return 1

    def failing(params, ctx):
        raise RuntimeError("boom")

    done = process.run_trial(trial, {"params": {}, "index": 0, "attempt": 1})
    assert done["status"] == "ok" and seen == [True]
    assert current_context() is None  # a later trial of one argument, or code between trials, finds none
    failed = process.run_trial(failing, {"params": {}, "index": 1, "attempt": 1})
    assert failed["status"] == "exception" and current_context() is None
