"""scripts/test.sh waits for the package manager's lock: when another install holds it, apt-get
failed at once with exit 100 and the test command with it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = "/var/lib/dpkg/lock-frontend"

pytestmark = pytest.mark.skipif(
    shutil.which("apt-get") is None or os.geteuid() != 0,
    reason="needs Debian's apt-get as root (what scripts/test.sh installs with)",
)


@pytest.mark.slow
def test_apt_install_waits_for_a_held_lock():
    installed = subprocess.run(["dpkg", "-s", "libjemalloc2"], capture_output=True).returncode == 0
    package = "libjemalloc2" if installed else "bash"  # already installed: nothing is downloaded
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what another apt-get or dpkg holds
    except OSError:
        os.close(fd)
        pytest.fail("another install holds the package manager's lock right now: run this test again")
    held_s = 4.0
    timer = threading.Timer(held_s, lambda: (fcntl.lockf(fd, fcntl.LOCK_UN), os.close(fd)))
    start = time.monotonic()
    timer.start()
    try:
        plain = subprocess.run(["apt-get", "install", "-y", "-qq", package], capture_output=True, text=True)
        assert plain.returncode == 100 and "lock" in plain.stderr  # what test.sh met before
        done = subprocess.run(
            ["bash", "-c", f". scripts/apt_install.sh && apt_install {package}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        timer.join()
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start >= held_s - 0.5  # it waited for the lock, then installed
