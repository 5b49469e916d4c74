"""A resume with other flags keeps each session's settings and says what changed (issue 23, 18)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

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
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if db.exists():
                with Store(db, readonly=True) as store:
                    run = store.get_run("r")
                    if run is not None and sum(t.status == "ok" for t in store.trials(run.run_id)) == 2:
                        break
    finally:
        first.send_signal(signal.SIGKILL)  # the third trial never ends in this session
        first.wait()
    go.touch()
    assert main([*argv, "--workers", "1"]) == 0  # resumes the third trial with other flags
    said = capsys.readouterr()
    assert "resumed with other settings" in said.err and "workers 2 → 1" in said.err
    with Store(db, readonly=True) as store:
        run = store.get_run("r")
        sessions = store.session_settings(run.run_id)
        resumed = [e for e in store.events(run.run_id) if e.kind == "run_resumed"]
    assert [s.session for s in sessions] == [1, 2]
    assert sessions[0].config["workers"] == 2 and sessions[1].config["workers"] == 1
    assert resumed and "with other settings" in resumed[-1].message and "workers 2 → 1" in resumed[-1].message
    assert main(["show", "r", "--store", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [t["session"] for t in shown["trials"]] == [1, 1, 2]
    assert [s["config"]["workers"] for s in shown["sessions"]] == [2, 1]
    assert main(["show", "r", "--store", str(db)]) == 0
    assert "settings per session" in capsys.readouterr().out
