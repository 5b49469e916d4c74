"""A run whose supervisor was killed is said to be interrupted, not running (issue 23, item 8)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from _waits import wait_for
from trainguard.cli import main
from trainguard.store import Store

HERE = Path(__file__).parent


def _runs(db: Path, capsys) -> dict:
    assert main(["runs", "--store", str(db), "--json"]) == 0
    return {r["name"]: r for r in json.loads(capsys.readouterr().out)["runs"]}


def test_runs_and_show_say_when_no_supervisor_holds_a_running_run(tmp_path, capsys):
    db = tmp_path / "s.db"
    script = tmp_path / "sup.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import trainguard
            with trainguard.Runner(store={str(db)!r}) as runner:
                runner.map({str(HERE / "runner_trials.py") + ":echo"!r}, [{{"sleep_s": 60}}], name="long")
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    try:

        def trial_started() -> bool:
            with Store(db, readonly=True) as store:
                info = store.get_run("long")
                return info is not None and bool(store.attempts(info.run_id))

        # the store not made yet is "not yet"
        wait_for(trial_started, 120, "the trial to start", ignore=(Exception,))
        assert _runs(db, capsys)["long"]["note"] is None  # its supervisor holds it: no note
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    row = _runs(db, capsys)["long"]
    assert row["status"] == "running"
    assert row["note"] == f"interrupted: supervisor pid {proc.pid} is gone; run it again to resume"
    assert main(["runs", "--store", str(db)]) == 0
    assert f"supervisor pid {proc.pid} is gone" in capsys.readouterr().out
    assert main(["show", "long", "--store", str(db)]) == 0
    assert "run it again to resume" in capsys.readouterr().out
