"""A resume with other flags keeps each session's settings and says what changed (issue 23, 18)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from _waits import wait_for
from trainguard.cli import main
from trainguard.store import Store

HERE = Path(__file__).parent
FN = str(HERE / "hostile_trials.py") + ":wait_for_file"


def test_a_resume_with_other_flags_keeps_the_first_sessions_settings(tmp_path, capsys):
    db = tmp_path / "s.db"
    params = tmp_path / "p.json"
    go = tmp_path / "go"
    params.write_text(json.dumps([{"x": 0}, {"x": 1}, {"x": 2, "wait_for": str(go)}]))
    argv = ["run", FN, "--params", str(params), "--store", str(db), "--name", "r", "--no-progress"]
    first = subprocess.Popen(
        [sys.executable, "-m", "trainguard", *argv, "--workers", "2", "--memory-limit", "6GB"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def two_ok() -> bool:
            with Store(db, readonly=True) as store:
                run = store.get_run("r")
                return run is not None and sum(t.status == "ok" for t in store.trials(run.run_id)) == 2

        # the store not made yet is "not yet"
        wait_for(two_ok, 120, "two trials of the first session to finish", ignore=(Exception,))
    finally:
        first.send_signal(signal.SIGKILL)  # the third trial never ends in this session
        first.wait()
    go.touch()
    # the second session: real workers again, other flags
    again = [a for a in argv if a != "--no-progress"]  # a line per trial: the resume line comes first
    assert main([*again, "--workers", "1", "--memory-limit", "3GB"]) == 0
    said = capsys.readouterr().err.splitlines()
    resume = [line for line in said if line.startswith("trainguard run: resume:")]
    threads = sessions_threads(db)
    # one short line, before the trial it runs, leaf by leaf (was the policy's JSON twice, 2,431 characters)
    assert resume == [
        f"trainguard run: resume: --memory-limit 6GB → 3GB, --workers 2 → 1, threads per worker {threads[0]} → "
        f"{threads[1]} (the trials that ran before keep their settings: `trainguard show r` lists each session's)"
    ]
    assert len(resume) == 1 and len(resume[0]) < 300 and "max_trials_per_worker" not in "\n".join(said)
    assert said.index(resume[0]) < next(i for i, line in enumerate(said) if line.startswith("trial 2:"))
    with Store(db, readonly=True) as store:
        run = store.get_run("r")
        sessions = store.session_settings(run.run_id)
        resumed = [e for e in store.events(run.run_id) if e.kind == "run_resumed"]
        # each trial's recorded session is the one its attempt ran in
        assert store.trial_sessions(run.run_id) == {0: 1, 1: 1, 2: 2}
        assert store.trials_in_sessions(run.run_id) == {1: 2, 2: 1}
    assert [s.session for s in sessions] == [1, 2]
    assert sessions[0].config["workers"] == 2 and sessions[1].config["workers"] == 1
    assert sessions[0].config["policy"]["memory_limit"] == 6 * 10**9
    assert sessions[1].config["policy"]["memory_limit"] == 3 * 10**9
    assert resumed and "memory_limit 6GB → 3GB, workers 2 → 1" in resumed[-1].message
    assert main(["show", "r", "--store", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [t["session"] for t in shown["trials"]] == [1, 1, 2]
    assert [s["config"]["workers"] for s in shown["sessions"]] == [2, 1]
    assert main(["show", "r", "--store", str(db)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # a long line may be wrapped at the console's width
    assert "settings per session" in text
    assert (
        "2 trials): memory_limit 6GB, workers 2" in text and "1 trials): memory_limit 3GB, workers 1" in text
    )
    # the report says each session's settings, not the last one's
    html = tmp_path / "r.html"
    assert main(["report", "r", "--store", str(db), "-o", str(html)]) == 0
    page = html.read_text()
    assert "Settings per session" in page and "memory_limit 6GB → 3GB, workers 2 → 1" in page
    assert "2 in session 1; 1 in session 2" in page  # the workers row
    assert "5.6 GiB in session 1; 2.8 GiB in session 2" in page  # the policy's memory_limit row


def sessions_threads(db: Path) -> list[int]:
    with Store(db, readonly=True) as store:
        run = store.get_run("r")
        return [s.config["threads"] for s in store.session_settings(run.run_id)]
