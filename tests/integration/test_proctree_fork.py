"""A fork that has not called exec yet is not counted as new memory (issue 15).

Between ``fork()`` and ``exec()`` a child's statm RSS counts every page its parent has resident, so
a sample of a TensorFlow worker taken while it starts ``uname -p`` read about twice the worker.
These tests hold a real ~160 MiB process that forks and waits before exec, and compare the tree's
reading with the parent's own RSS: without the fix the reading is about 2x the parent's.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from trainguard import process as proctree
from trainguard.process import tree_memory

pytestmark = pytest.mark.skipif(not proctree.HAVE_PROC, reason="needs /proc")

HOLDER = r"""
import os, sys, time
held = bytearray(b"\x01") * (160 << 20)   # every page touched
pid = os.fork()
if pid == 0:
    # the child writes a little of its own (copy-on-write), then waits before exec
    mine = bytearray(b"\x02") * (8 << 20)
    os.write(1, b"forked\n")  # one write each: the two lines never interleave on the pipe
    time.sleep(30)
    os._exit(0)
os.write(1, f"{pid}\n".encode())
time.sleep(30)
"""


@pytest.fixture()
def forked_holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        child = int(next(line for line in lines if line.strip().isdigit()))
        yield proc.pid, child
    finally:
        proctree.kill_tree(proc.pid)  # the fork too, which would outlive its parent
        proc.wait()


def test_unexeced_fork_is_recognised_and_charged_its_private_pages(forked_holder):
    parent, child = forked_holder
    assert proctree.unexeced_fork_parent(child) == parent
    assert proctree.unexeced_fork_parent(parent) is None  # exec'd by Popen
    parent_rss = proctree.statm_rss_bytes(parent)
    child_rss = proctree.statm_rss_bytes(child)
    # the premise: the child's statm shows the parent's pages
    assert child_rss > 0.8 * parent_rss
    charge = proctree.fork_charge_bytes(child, parent)
    # its own 8 MiB (plus a little copied on write), far from the parent's 160 MiB
    assert 4 << 20 <= charge < 48 << 20


def test_process_tree_reading_counts_a_fork_once(forked_holder):
    parent, child = forked_holder
    tree = proctree.ProcessTree(parent)
    try:
        readings = []
        for _ in range(5):
            got = tree.read(rediscover=True)
            assert got is not None
            readings.append(got[0])
            time.sleep(0.02)
    finally:
        tree.close()
    parent_rss = proctree.statm_rss_bytes(parent)
    # counted twice, the tree would read about 2 x the parent's RSS (>= 1.8x); once, under 1.35x
    assert max(readings) < 1.35 * parent_rss, (readings, parent_rss)


def test_tree_memory_counts_a_fork_once(forked_holder):
    parent, _child = forked_holder
    reading = tree_memory(parent)
    parent_rss = proctree.statm_rss_bytes(parent)
    assert reading.rss_bytes < 1.35 * parent_rss
    assert len(reading.pids) == 2


def test_a_child_that_execs_is_counted_in_full():
    code = "import time; x = bytearray(b'\\x01') * (64 << 20); print('ok', flush=True); time.sleep(30)"
    outer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {code!r}]); time.sleep(30)",
        ],
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kids = proctree.descendants(outer.pid)
            if kids and (proctree.statm_rss_bytes(kids[0]) or 0) > 60 << 20:
                break
            time.sleep(0.05)
        kid = proctree.descendants(outer.pid)[0]
        assert proctree.unexeced_fork_parent(kid) is None
        reading = tree_memory(outer.pid)
        assert reading.rss_bytes >= (proctree.statm_rss_bytes(outer.pid) or 0) + (60 << 20)
    finally:
        proctree.kill_tree(outer.pid)
        outer.wait()


def test_descendants_lists_each_pid_once(monkeypatch):
    # two threads of one parent both listing a child (it moved between them mid-read)
    import trainguard.process.tree

    monkeypatch.setattr(
        trainguard.process.tree, "children", lambda pid: {1: [2, 3, 2], 2: [4], 3: [4]}.get(pid, [])
    )
    assert trainguard.process.tree.descendants(1) == [2, 3, 4]


def test_a_sampler_reading_counts_a_fork_once(forked_holder):
    from trainguard.sampling import Sampler

    parent, _child = forked_holder
    sampler = Sampler(["rss_bytes"], pid=parent)
    try:
        readings = []
        for _ in range(5):
            readings.append(sampler.sample()["rss_bytes"])
            time.sleep(0.02)
    finally:
        sampler.close()
    parent_rss = proctree.statm_rss_bytes(parent)
    assert None not in readings
    # counted twice, the sample would read about 2 x the parent's RSS; once, under 1.35x
    assert max(readings) < 1.35 * parent_rss, (readings, parent_rss)
    assert min(readings) > 0.9 * parent_rss, (readings, parent_rss)
