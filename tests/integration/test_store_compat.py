"""A store written by the release before the runner's split (8f299fd) opens and resumes.

``tests/data/store_8f299fd.db`` was made by that release's code: ``Runner(workers=1,
policy=Policy(on_error="stop")).map("runner_trials.py:fault", PARAMS, name=RUN)`` run from
``tests/integration``; trial 1 raised, so the run stopped with trials 2 and 3 never started.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from trainguard import Policy, Runner
from trainguard.store import Store

HERE = Path(__file__).parent
FIXTURE = HERE.parent / "data" / "store_8f299fd.db"
RUN = "made-by-8f299fd"
PARAMS = [{"kind": "ok"}, {"kind": "raise"}, {"kind": "ok"}, {"kind": "ok"}]


def test_a_store_made_by_the_release_before_opens_and_resumes(tmp_path, monkeypatch):
    db = tmp_path / "old.db"
    shutil.copy(FIXTURE, db)
    with Store(db, readonly=True) as store:  # written before the bytes-in-use table: none read
        info = store.get_run(RUN)
        assert info is not None and store.bytes_in_use(info.run_id) == []
        assert store.trial_sessions(info.run_id) == {0: 1, 1: 1}  # inferred: the file has no session column
    monkeypatch.chdir(HERE)  # the run's function was given relative to this folder
    with Runner(workers=1, store=db, policy=Policy(on_error="continue")) as runner:
        results = runner.map("runner_trials.py:fault", PARAMS, name=RUN)
    assert [r.status for r in results] == ["ok", "failed", "ok", "ok"]
    assert [r.reused for r in results] == [True, True, False, False]
    assert results[1].error is not None and "boom from the trial" in results[1].error.message
    # the release's error dict loads as the record: its keys to their fields
    assert results[1].error.exc_type == "builtins.RuntimeError" and results[1].error.status == "exception"
    assert results[1].error.traceback is not None and "boom from the trial" in results[1].error.traceback
    with Store(db) as store:
        info = store.get_run(RUN)
        assert info is not None and info.sessions == 2 and info.status == "completed"
        statuses = sorted((a.index, a.status) for a in store.attempts(info.run_id))
        assert statuses == [(0, "ok"), (1, "exception"), (2, "ok"), (3, "ok")]
        # the old attempts got their session when the store was opened for writing (the run had one)
        assert store.trial_sessions(info.run_id) == {0: 1, 1: 1, 2: 2, 3: 2}
    # the CLI reads it as before: show's JSON and the report
    shown = subprocess.run(
        [sys.executable, "-m", "trainguard", "show", RUN, "--store", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run"]["name"] == RUN
    html = tmp_path / "old.html"
    made = subprocess.run(
        [sys.executable, "-m", "trainguard", "report", RUN, "--store", str(db), "-o", str(html)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert RUN in html.read_text()
