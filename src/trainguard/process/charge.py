"""What a tree's memory limit counts, pure: its anonymous pages and its shared memory, not the
file-backed pages the kernel can drop.

A tree's RSS is three kinds of resident pages (``/proc/PID/status``): anonymous (``RssAnon``: heap,
stacks, arrays), file-backed (``RssFile``: libraries' code, a file read through ``mmap``) and shmem
(``RssShmem``: shared anonymous mappings, tmpfs and ``/dev/shm`` files mapped). Clean file-backed
pages are reclaimable: under pressure the kernel drops them and reads them again when touched, so
a trial that maps a 1.5 GB file is not using 1.5 GB of the machine's memory, and its cgroup is
charged little for them. Anonymous and shmem pages stay until their owner frees them (shmem and
tmpfs pages even outlive their process while the file exists).

A file in tmpfs (``/dev/shm``) holds memory that no RSS shows unless it is mapped: a trial that
writes 2.5 GB there with ``write()`` has an RSS of a few MB. So its shared memory is read three
ways, which overlap (a mapped tmpfs file is in all three): the tree's ``RssShmem``, the tmpfs
files it holds open or created (their allocated bytes), and its cgroup's ``shmem`` (memory.stat,
where the kernel accounts memory for the worker's cgroup). The largest of them is counted, so a
file mapped and held open is counted once; a tree holding two kinds at once (a shared anonymous
mapping and an unmapped tmpfs file) is counted at the larger, unless its cgroup's ``shmem``, which
holds both, is read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemorySplit", "needs_split"]


@dataclass(frozen=True, slots=True)
class MemorySplit:
    """A tree's resident pages by kind, and the tmpfs memory it holds.

    ``anon_bytes``, ``file_bytes`` and ``shmem_bytes`` are summed over the tree's processes (a
    fork that has not called exec is charged its private pages, as anonymous); ``tmpfs_bytes`` is
    what the tmpfs files it holds open or created during the trial occupy; ``cgroup_shmem_bytes``
    its cgroup's ``shmem`` (None where the kernel does not report it).
    """

    anon_bytes: int
    file_bytes: int
    shmem_bytes: int
    tmpfs_bytes: int = 0
    cgroup_shmem_bytes: int | None = None

    @property
    def rss_bytes(self) -> int:
        """The tree's resident set, every kind together (what statm reports)."""
        return self.anon_bytes + self.file_bytes + self.shmem_bytes

    @property
    def shared_bytes(self) -> int:
        """The tree's shared memory counted: the largest of its three overlapping readings."""
        return max(self.shmem_bytes, self.tmpfs_bytes, self.cgroup_shmem_bytes or 0)

    @property
    def counted_bytes(self) -> int:
        """What the memory limit counts: anonymous pages and shared memory, not file-backed pages."""
        return self.anon_bytes + self.shared_bytes

    @property
    def seen_bytes(self) -> int:
        """What is recorded as the tree's memory: its RSS, or more when tmpfs holds more than the
        tree has mapped (a peak never reads lower than the RSS it read before)."""
        return max(self.rss_bytes, self.counted_bytes)


def needs_split(rss_bytes: int, tmpfs_bytes: int, limit_bytes: int | None) -> bool:
    """Whether a sample needs the split of its RSS by kind (a read of ``/proc/PID/status`` per
    process, ten times the cost of the ``statm`` read that gave ``rss_bytes``).

    The counted figure is at most ``rss_bytes + tmpfs_bytes`` (anonymous and shmem pages are part
    of the RSS), so while that is under the limit and nothing is held in tmpfs, the split could
    change nothing: neither the kill nor the figure recorded (the RSS).
    """
    if tmpfs_bytes > 0:
        return True
    return limit_bytes is not None and rss_bytes > limit_bytes
