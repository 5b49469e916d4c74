"""A supervisor killed with SIGKILL leaves its share() data, its private run folder and its
temporary checkpoints; they are named for it (pid and start time), so the next start removes them,
and only them: a live owner's folder and another user's stay."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _waits import wait_for
from trainguard import Runner
from trainguard._tempdirs import make_dir

TRIALS = str(Path(__file__).parents[1] / "catalogue" / "catalogue_trials.py")


def _owned(pid: int) -> list[str]:
    return sorted(
        glob.glob(f"/dev/shm/trainguard-*-{pid}-*")
        + glob.glob(f"{tempfile.gettempdir()}/trainguard-*-{pid}-*")
    )


def test_a_killed_supervisors_folders_are_swept_at_the_next_start(tmp_path):
    script = tmp_path / "supervisor.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import numpy as np
            import trainguard
            if __name__ == "__main__":
                data = trainguard.share({{"x": np.ones(1 << 16, dtype=np.float32)}})
                with trainguard.Runner(store=None) as runner:
                    runner.map({TRIALS + ":sleeps"!r}, [{{"s": 60}}], data=data)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    try:
        wait_for(lambda: len(_owned(proc.pid)) >= 3, 120, "the run's three temporary folders")
        left = _owned(proc.pid)
        kinds = sorted(os.path.basename(p).split("-")[1] for p in left)
        assert kinds == ["checkpoints", "run", "share"], left
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the supervisor and its worker: nothing of ours runs in them
        proc.wait()
    assert all(os.path.isdir(p) for p in left)
    # another user's folder of the same dead owner, and a live owner's (this process's)
    theirs = os.path.join(tempfile.gettempdir(), f"{os.path.basename(left[1]).rsplit('-', 1)[0]}-theirs")
    os.mkdir(theirs, 0o700)
    try:
        os.chown(theirs, 65534, 65534)
    except PermissionError:  # not root: no folder of another user to make, the rest still holds
        os.rmdir(theirs)
        os.symlink("/nonexistent", theirs)  # not a folder: never judged, never removed
    mine = make_dir("run")
    try:
        with Runner(store=None) as runner:
            assert runner.map(f"{TRIALS}:echo", [{"x": 1}])[0].ok
        assert [p for p in left if os.path.exists(p)] == []
        assert os.path.lexists(theirs) and os.path.isdir(mine)
    finally:
        if os.path.islink(theirs):
            os.unlink(theirs)
        shutil.rmtree(theirs, ignore_errors=True)
        shutil.rmtree(mine, ignore_errors=True)
