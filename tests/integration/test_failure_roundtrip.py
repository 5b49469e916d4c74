"""A trial's failure crosses the worker's pipe and the store as the same frozen record."""

from __future__ import annotations

from pathlib import Path

from trainguard import Failure, Policy, Runner
from trainguard.store import Store

HERE = Path(__file__).parent


def test_a_failure_crosses_the_worker_pipe_and_the_store_as_the_same_record(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    db = tmp_path / "s.db"
    with Runner(workers=1, store=db, policy=Policy(retries=0)) as runner:
        ok, raised = runner.map("runner_trials.py:fault", [{"kind": "ok"}, {"kind": "raise"}], name="f")
    assert ok.error is None
    error = raised.error
    assert isinstance(error, Failure) and error.status == "exception"
    assert error.exc_type == "builtins.RuntimeError" and error.mro[0] == "builtins.RuntimeError"
    assert error.message == "RuntimeError: boom from the trial"
    assert error.traceback is not None and "boom from the trial" in error.traceback
    assert error.attempt == 1 and error.worker_id == raised.worker_id  # the supervisor's additions
    assert raised.to_dict()["error"] == error.to_dict()  # `run --json`: the flat form, as before
    with Store(db, readonly=True) as store:
        info = store.get_run("f")
        assert info is not None
        trial = store.trials(info.run_id)[1]
        (attempt,) = store.attempts(info.run_id, 1)
    assert trial.error == error and attempt.error == error
