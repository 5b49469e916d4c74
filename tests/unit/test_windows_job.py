"""The Windows tier against the real Win32 API. Marked ``windows``: these have not run on this
project's Linux machines; the hosted CI's Windows job runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _waits import wait_for

pytestmark = [pytest.mark.windows, pytest.mark.portable]


def _start(code: str) -> subprocess.Popen:
    from trainguard.process import popen_options

    return subprocess.Popen([sys.executable, "-c", code], **popen_options("windows"))


def test_a_job_object_holds_the_tree_caps_memory_and_keeps_the_peak():
    from trainguard.process import tier_tree

    proc = _start(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "block = b'x' * (50 * 2**20)\n"
        "time.sleep(60)\n"
    )
    tree = tier_tree(proc, "windows", memory_limit_bytes=400 * 2**20)
    wait_for(lambda: len(tree.pids()) >= 2, 60, "the child to join the job")
    # the parent touches its 50 MiB block after starting the child: the job's peak shows it
    wait_for(lambda: tree.peak_bytes() > 50 * 2**20, 60, "the job's peak to pass 50 MiB")
    rss, _ = tree.read()
    assert rss > 50 * 2**20
    tree.kill()
    proc.wait(10)
    assert tree.job.pids() == []
    tree.close()


def test_the_job_memory_limit_is_enforced_by_the_os():
    from trainguard.process import tier_tree

    proc = _start("block = b'x' * (600 * 2**20)\n")
    tree = tier_tree(proc, "windows", memory_limit_bytes=200 * 2**20)
    assert proc.wait(60) != 0  # MemoryError: the OS refused the commit
    tree.close()


def test_closing_the_job_ends_its_processes():
    from trainguard.process import tier_tree

    proc = _start("import time; time.sleep(60)")
    tree = tier_tree(proc, "windows")
    tree.close()  # kill on close
    assert proc.wait(10) is not None
