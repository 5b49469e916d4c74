"""``scripts/slurm-local.sh``'s private clusters and the machine's ``munged``: munge is shared by
every Slurm on the machine, so a private cluster starts it only when it is not running, and its
stop takes it away only when the script started it and no ``slurmctld`` is left (the tests' own
cluster left a ``munged`` running after every suite before). Solo: another test's cluster beside
it would keep ``munged`` up, as it must."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-local.sh"

pytestmark = [
    pytest.mark.solo,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a private Slurm starts slurmctld/slurmd, which needs root"),
    pytest.mark.skipif(
        not (shutil.which("slurmctld") and shutil.which("munged")),
        reason="needs Debian's slurm-wlm and munge",
    ),
]


def _script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def _munged() -> str:
    return subprocess.run(["pgrep", "-x", "munged"], capture_output=True, text=True).stdout.strip()


def _answers(conf: Path) -> bool:
    env = dict(os.environ, SLURM_CONF=str(conf))
    return subprocess.run(["sinfo", "-h"], capture_output=True, env=env, timeout=30).returncode == 0


def test_munged_stays_while_a_cluster_uses_it_and_goes_with_the_last_one_it_started(tmp_path: Path) -> None:
    env = dict(os.environ, TRAINGUARD_SLURM_DIR=str(tmp_path / "state"))
    before = _munged()
    first, second = tmp_path / "first", tmp_path / "second"
    try:
        for folder in (first, second):
            done = _script(env, "start-private", str(folder))
            assert done.returncode == 0, done.stderr[-2000:]
        assert _munged()
        assert _script(env, "stop-private", str(first)).returncode == 0
        # the second cluster still authenticates through the shared munged
        assert _munged() and _answers(second / "slurm.conf")
        assert _script(env, "stop-private", str(second)).returncode == 0
        if before:
            # a munged this script did not start is the machine's: left as it was
            assert _munged() == before
        else:
            assert _munged() == ""
    finally:
        for folder in (first, second):
            _script(env, "stop-private", str(folder))
