"""What memory_limit counts: tmpfs files a trial writes (no RSS shows them) and not the clean
file-backed pages it maps (reclaimable). Real workers, a real store (the hostile-use findings 5, 6)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from trainguard.process.tmpfs import tmpfs_devices
from trainguard.runner import Policy, Runner

HERE = Path(__file__).parent
TRIALS = str(HERE / "tmpfs_trials.py")
MIB = 1 << 20

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.isdir("/dev/shm"), reason="Linux /dev/shm"
)


def _on_disk(tmp_path: Path) -> Path:
    """A folder on a real disk (not tmpfs): tmp_path, else /var/tmp."""
    for folder in (tmp_path, Path("/var/tmp")):
        if folder.is_dir() and os.stat(folder).st_dev not in tmpfs_devices():
            return folder
    pytest.skip("no folder on a disk-backed file system")


def test_a_trial_writing_into_dev_shm_is_killed_for_memory_and_its_file_is_removed(tmp_path):
    free = os.statvfs("/dev/shm")
    if free.f_bavail * free.f_frsize < 800 * MIB:
        pytest.skip("/dev/shm has less than 800 MiB free")
    path = f"/dev/shm/tmpfs-test-{uuid.uuid4().hex}"
    policy = Policy(memory_limit="300MB", peak_ratio=None)
    try:
        with Runner(workers=1, policy=policy, store=tmp_path / "s.db") as runner:
            (result,) = runner.map(
                f"{TRIALS}:fill_shm", [{"path": path, "mb": 600, "hold_s": 15}], name="shm"
            )
            events = runner.store.events(runner.store.get_run("shm").run_id)
        # written with write() and closed: its RSS stays near the bare worker's; the file is memory
        assert result.status == "failed" and result.error.status == "killed_memory", result.error
        message = result.error.message
        assert "memory_limit" in message and "shmem/tmpfs" in message, message
        assert result.error.rss_bytes > 300_000_000
        assert result.error.detail["tmpfs_bytes"] > 250 * MIB, result.error
        assert result.peak_rss_bytes is not None and result.peak_rss_bytes > 300_000_000
        assert not os.path.exists(path)  # its memory does not outlive the trial
        removed = [e for e in events if e.kind == "tmpfs_removed"]
        assert len(removed) == 1 and path in removed[0].message, [e.message for e in events]
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_a_trial_reading_a_file_through_mmap_is_not_charged_its_clean_pages(tmp_path):
    big = _on_disk(tmp_path) / f"mapped-{uuid.uuid4().hex}.bin"
    try:
        chunk = b"\7" * (8 << 20)
        with open(big, "wb") as fh:
            for _ in range(600 // 8):
                fh.write(chunk)
        policy = Policy(memory_limit="300MB", peak_ratio=None)
        with Runner(workers=1, policy=policy, store=tmp_path / "s.db") as runner:
            (result,) = runner.map(f"{TRIALS}:mmap_read", [{"path": str(big), "hold_s": 1.0}], name="mapped")
        # every page of the 600 MiB file was read (resident in the tree: its RSS over the limit)
        assert result.ok, result.error
        assert result.value == 7 * (600 * MIB // os.sysconf("SC_PAGE_SIZE"))
    finally:
        big.unlink(missing_ok=True)
