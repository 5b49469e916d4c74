"""The test command says which Debian packages it will install before it installs them, and installs
none when it is not run as root (it installed 116 packages unannounced before).

``apt-get`` here is a stand-in on PATH that writes down how it was called: the real one would install
packages on this machine (tests/integration/test_apt_lock.py runs the real one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ["bash", "grep", "cut", "tr", "awk", "cat", "id", "dirname", "sh"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv (to run as nobody)"
)


@pytest.fixture
def bare_path():
    """A PATH with the shell's tools, a recording apt-get and an ldconfig that knows no library, and no
    node, slurmctld or munged: the machine a fresh clone meets (in a folder nobody can enter too)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="trainguard-syspkg-"))
    tmp_path.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    calls = tmp_path / "apt-calls"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >&2\necho "$*" >> {calls}\n')
    (bin_dir / "ldconfig").write_text("#!/bin/sh\nexit 0\n")
    for stub in ("apt-get", "ldconfig"):
        (bin_dir / stub).chmod(0o755)
    # the scripts as a fresh clone has them, where nobody can read them whatever this checkout's
    # folders allow (a clone in a private temporary folder is not readable by nobody)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ("system_packages.sh", "apt_install.sh"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
        (scripts / name).chmod(0o644)
    yield bin_dir, calls
    shutil.rmtree(tmp_path)


def _install(bin_dir: Path, *, as_nobody: bool) -> subprocess.CompletedProcess[str]:
    script = f". {bin_dir.parent}/scripts/system_packages.sh && install_system_packages"
    command = ["bash", "-c", script]
    if as_nobody:
        command = [
            str(shutil.which("setpriv")),
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            *command,
        ]
    return subprocess.run(
        command, capture_output=True, text=True, env={"PATH": str(bin_dir), "HOME": "/tmp"}, timeout=60
    )


def test_root_is_told_each_package_and_why_before_the_install(bare_path):
    bin_dir, calls = bare_path
    done = _install(bin_dir, as_nobody=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    first_install = next(i for i, line in enumerate(lines) if line.startswith("apt-get "))
    announced = "\n".join(lines[:first_install])
    assert "installing Debian packages" in announced
    for package, why in [
        ("libjemalloc2", "allocator"),
        ("nodejs", "TensorFlow.js"),
        ("slurm-wlm", "Slurm"),
        ("munge", "Slurm"),
    ]:
        assert any(package in line and why in line for line in lines[:first_install]), (package, announced)
    installed = calls.read_text()
    assert "libjemalloc2" in installed and "slurm-wlm" in installed and "nodejs" in installed


def test_another_user_installs_nothing_and_says_so_in_one_line(bare_path):
    bin_dir, calls = bare_path
    done = _install(bin_dir, as_nobody=True)
    assert done.returncode == 0, done.stderr
    assert not calls.exists()  # apt-get was never called
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "installing no system packages" in lines[0] and "slurm-wlm" in lines[0]
    assert "apt-get install" in lines[0]  # what to run as root
