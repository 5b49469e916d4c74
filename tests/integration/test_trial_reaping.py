"""A process a trial starts does not live into the next trial of the same worker."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil

from trainguard import Runner


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def leave_a_daemon(params):
    note = Path(params["note"])
    if params["i"] == 0:
        # a double fork with setsid: the sleeper leaves the trial's process group and its parent
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import subprocess\n"
                "p = subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                "print(p.pid)",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        note.write_text(out.stdout.strip())
        return {"worker": os.getpid()}
    pid = int(note.read_text())
    return {"worker": os.getpid(), "alive": _alive(pid)}


def test_a_trials_detached_child_is_ended_before_the_next_trial(tmp_path):
    note = tmp_path / "pid"
    try:
        with Runner(workers=1, store=None) as runner:
            results = runner.map(
                leave_a_daemon, [{"i": 0, "note": str(note)}, {"i": 1, "note": str(note)}], name="reap"
            )
        first, second = (r.value for r in results)
        assert second["worker"] == first["worker"]  # the same worker ran both
        assert second["alive"] is False, "the first trial's daemon outlived its trial"
    finally:
        if note.exists():
            with contextlib.suppress(OSError):
                os.kill(int(note.read_text()), 9)
