"""What memory_limit counts (process/charge.py, the limit's decision and words), and the tree's
split by kind read from /proc (process/tree.py)."""

from __future__ import annotations

import mmap
import os
import sys
import uuid

import pytest

from trainguard.process import ProcessTree
from trainguard.process.charge import MemorySplit, needs_split
from trainguard.process.tree import status_split
from trainguard.runner.policy import Policy, check_limits, classify_end

MIB = 1 << 20
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_limit_counts_anonymous_and_shared_memory_not_file_backed_pages():
    split = MemorySplit(anon_bytes=100 * MIB, file_bytes=900 * MIB, shmem_bytes=50 * MIB)
    assert split.rss_bytes == 1050 * MIB
    assert split.counted_bytes == 150 * MIB
    assert split.seen_bytes == 1050 * MIB  # the figure recorded never reads below the RSS


def test_the_three_readings_of_shared_memory_overlap_and_the_largest_counts():
    # a tmpfs file mapped and held open is in RssShmem and in the files held: counted once
    mapped = MemorySplit(10 * MIB, 0, 600 * MIB, tmpfs_bytes=600 * MIB)
    assert mapped.counted_bytes == 610 * MIB
    # written with write() and closed: no RSS shows it, the file does
    written = MemorySplit(10 * MIB, 30 * MIB, 0, tmpfs_bytes=600 * MIB)
    assert written.counted_bytes == 610 * MIB
    assert written.seen_bytes == 610 * MIB > written.rss_bytes
    # the cgroup's shmem holds both kinds at once where the kernel reports it
    both = MemorySplit(10 * MIB, 0, 200 * MIB, tmpfs_bytes=300 * MIB, cgroup_shmem_bytes=500 * MIB)
    assert both.shared_bytes == 500 * MIB
    assert MemorySplit(1, 2, 3, cgroup_shmem_bytes=None).shared_bytes == 3


def test_the_split_is_read_only_when_it_could_change_something():
    assert not needs_split(200 * MIB, 0, 300 * MIB)  # under the limit, nothing in tmpfs
    assert not needs_split(10**12, 0, None)  # no limit, nothing in tmpfs: the RSS is recorded
    assert needs_split(301 * MIB, 0, 300 * MIB)  # over: file-backed pages may bring it under
    assert needs_split(1 * MIB, 1, None)  # tmpfs holds something: the recorded figure grows


def test_a_split_under_the_limit_is_no_kill_though_its_rss_is_over():
    policy = Policy(memory_limit=1000)
    split = MemorySplit(anon_bytes=400, file_bytes=900, shmem_bytes=100)
    assert check_limits(policy, rss_bytes=split.rss_bytes, gpu_bytes=None, elapsed_s=0, memory=split) is None
    # without a split (a backend that cannot read one) the RSS counts, as before
    assert (
        check_limits(policy, rss_bytes=split.rss_bytes, gpu_bytes=None, elapsed_s=0).status == "killed_memory"
    )


def test_a_kill_says_what_it_counted_and_what_it_did_not():
    policy = Policy(memory_limit=300 * MIB)
    split = MemorySplit(40 * MIB, 12 * MIB, 0, tmpfs_bytes=600 * MIB)
    kill = check_limits(policy, rss_bytes=52 * MIB, gpu_bytes=None, elapsed_s=1.0, memory=split)
    assert kill is not None and kill.status == "killed_memory"
    assert kill.value == 640 * MIB and kill.memory == split
    assert kill.message == (
        "killed at memory_limit: tree RSS 640.0 MiB > 300.0 MiB (anonymous 40.0 MiB + shmem/tmpfs "
        "600.0 MiB counted; file-backed 12.0 MiB not counted (reclaimable))"
    )
    end = classify_end(-9, in_trial=True, kill=kill)
    assert end.attempt_status == "killed_memory"
    assert end.detail["rss_bytes"] == 640 * MIB and end.detail["limit_bytes"] == 300 * MIB
    assert (end.detail["anon_bytes"], end.detail["shared_bytes"]) == (40 * MIB, 600 * MIB)
    assert (end.detail["file_bytes"], end.detail["tmpfs_bytes"]) == (12 * MIB, 600 * MIB)


def test_a_kill_without_shared_memory_or_file_pages_names_only_what_it_had():
    kill = check_limits(
        Policy(memory_limit=100 * MIB),
        rss_bytes=0,
        gpu_bytes=None,
        elapsed_s=0,
        memory=MemorySplit(200 * MIB, 0, 0),
    )
    assert kill is not None
    assert kill.message.endswith("(anonymous 200.0 MiB counted)")


@linux
def test_status_gives_this_process_its_pages_by_kind(tmp_path):
    before = status_split(os.getpid())
    assert before is not None
    held = bytearray(64 * MIB)
    held[:: mmap.PAGESIZE] = b"\1" * len(held[:: mmap.PAGESIZE])  # touch every page
    anon = status_split(os.getpid())
    assert anon is not None and anon[0] - before[0] > 60 * MIB
    # a file on disk read through a mapping: file-backed pages
    disk = tmp_path / "f.bin"
    disk.write_bytes(b"\2" * (32 * MIB))
    with open(disk, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as view:
        sum(view[i] for i in range(0, len(view), mmap.PAGESIZE))
        mapped = status_split(os.getpid())
        assert mapped is not None and mapped[1] - anon[1] > 30 * MIB
    # a /dev/shm file mapped and written: shmem pages
    shm = f"/dev/shm/charge-unit-{uuid.uuid4().hex}"
    try:
        with open(shm, "w+b") as fh:
            fh.truncate(32 * MIB)
            with mmap.mmap(fh.fileno(), 32 * MIB) as view:
                view[:: mmap.PAGESIZE] = b"\3" * len(view[:: mmap.PAGESIZE])
                shared = status_split(os.getpid())
                assert shared is not None and shared[2] - anon[2] > 30 * MIB
    finally:
        os.unlink(shm)
    del held
    assert status_split(2**22 + 12345) is None  # no such process


@linux
def test_a_trees_split_sums_to_what_its_statm_reads():
    tree = ProcessTree(os.getpid())
    try:
        reading = tree.read(rediscover=True)
        split = tree.split(tmpfs_bytes=5, cgroup_shmem_bytes=7)
        assert reading is not None and split is not None
        # read moments apart: the same pages within a few MiB of this process's own churn
        assert abs(split.rss_bytes - reading[0]) < 8 * MIB
        assert (split.tmpfs_bytes, split.cgroup_shmem_bytes) == (5, 7)
        assert split.anon_bytes > 0 and split.file_bytes > 0
    finally:
        tree.close()
    assert tree.split() is None  # closed
