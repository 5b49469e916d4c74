"""Which tmpfs files are a trial's, what they hold, and which are removed at its end
(process/tmpfs.py), on real files in a folder of /dev/shm and real processes holding them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from trainguard.process.tmpfs import TmpfsWatch, cgroup_shmem_bytes, open_tmpfs_files, tmpfs_devices

MIB = 1 << 20
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.isdir("/dev/shm"), reason="Linux /dev/shm"
)
ME = os.getpid()


def _counted(watch: TmpfsWatch, folder: str) -> int:
    """What the watch counts of the test's folder: this test process may hold other tmpfs files
    open that earlier tests in it left (a joblib or multiprocessing segment), which count too."""
    assert watch.memory_bytes == sum(f.memory_bytes for f in watch.files) if watch.active else True
    return sum(f.memory_bytes for f in watch.files if f.path.startswith(folder + "/"))


@pytest.fixture
def folder():
    path = f"/dev/shm/tmpfs-watch-unit-{uuid.uuid4().hex}"
    os.mkdir(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _write(path: str, mib: int) -> None:
    with open(path, "wb") as fh:
        fh.write(b"\1" * (mib * MIB))


def _holder(path: str) -> subprocess.Popen[bytes]:
    """A process that holds ``path`` open until killed."""
    code = "import sys, time; f = open(sys.argv[1], 'rb'); print('ok', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ok\n"
    return proc


def test_a_file_made_while_the_trial_runs_alone_is_counted_and_removed_once_seen_held(folder):
    _write(f"{folder}/before", 1)
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    held = open(f"{folder}/made", "wb")
    held.write(b"\1" * (3 * MIB))
    held.flush()
    watch.tick([ME], sole=True)  # the tree holds it open: the trial's
    held.close()
    _write(f"{folder}/never-held", 2)  # written and closed between two scans: maybe another's
    watch.scan([ME], sole=True)
    assert _counted(watch, folder) == 5 * MIB  # both count; the file from before does not
    removed = watch.end([ME])
    assert [f.path for f in removed] == [f"{folder}/made"]
    assert sorted(os.listdir(folder)) == ["before", "never-held"]
    assert watch.memory_bytes == 0 and not watch.active


def test_beside_other_trials_only_a_file_the_tree_holds_open_is_its(folder):
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    _write(f"{folder}/someone-elses", 2)
    _write(f"{folder}/held", 1)
    holder = _holder(f"{folder}/held")
    try:
        watch.tick([holder.pid], sole=False)
        assert _counted(watch, folder) == 1 * MIB
        removed = watch.end([holder.pid])
    finally:
        holder.kill()
        holder.wait()
    assert [f.path for f in removed] == [f"{folder}/held"]
    assert os.listdir(folder) == ["someone-elses"]


def test_a_file_held_open_outside_the_tree_is_left_in_place_and_not_counted(folder):
    # made while the trial runs alone, but another process holds it open as it first shows: another
    # program's (another run's trial writing it, another job of this user), so it charges nothing,
    # then or after that process lets it go (a suite's other tests wrote 64-400 MiB files there,
    # charged to a lone trial beside them: a run stopped as "alone over the budget")
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    _write(f"{folder}/shared", 1)
    outside = _holder(f"{folder}/shared")
    try:
        watch.tick([ME], sole=True)
        assert _counted(watch, folder) == 0
    finally:
        outside.kill()
        outside.wait()
    watch.scan([ME], sole=True)
    assert _counted(watch, folder) == 0
    _write(f"{folder}/unheld", 2)  # written and closed between two scans: maybe the trial's
    watch.scan([ME], sole=True)
    assert _counted(watch, folder) == 2 * MIB
    assert watch.end([ME]) == []  # neither was seen held by the tree: both stay
    assert sorted(os.listdir(folder)) == ["shared", "unheld"]


def test_a_shared_array_the_tree_holds_open_in_trainguards_own_folder_is_not_the_trials(folder):
    # share()'s arrays are files inside a trainguard-share-... folder; a worker holds one open while
    # it maps it: seen then, it was charged as the trial's tmpfs file on top of the worker's USS
    own = f"{folder}/trainguard-share-{ME}-123-abcd"
    os.mkdir(own)
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    _write(f"{own}/x.npy", 2)
    with open(f"{own}/x.npy", "rb"):
        watch.scan([ME], sole=True)  # a scan while it is held (the folder changed, or a second went by)
        assert _counted(watch, folder) == 0
    assert watch.end([ME]) == [] and os.path.exists(f"{own}/x.npy")


def test_trainguards_own_files_and_other_users_files_are_never_the_trials(folder):
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    own = f"{folder}/trainguard-share-{ME}-123-abcd"
    _write(own, 1)
    other = None
    if os.getuid() == 0:
        other = f"{folder}/another-users"
        _write(other, 1)
        os.chown(other, 54321, 54321)
    watch.tick([ME], sole=True)
    assert _counted(watch, folder) == 0
    assert watch.end([ME]) == []
    assert os.path.exists(own) and (other is None or os.path.exists(other))


def test_a_file_being_written_is_counted_as_it_grows_between_scans(folder):
    watch = TmpfsWatch(os.getuid(), folder=folder, rescan_s=3600.0)
    watch.begin()
    with open(f"{folder}/growing", "wb") as fh:
        fh.write(b"\1" * MIB)
        fh.flush()
        watch.tick([ME], sole=False)  # the folder changed: a scan finds it held by the tree
        assert _counted(watch, folder) == 1 * MIB
        fh.write(b"\1" * (4 * MIB))
        fh.flush()
        watch.tick([ME], sole=False)  # no scan (the folder did not change): the file is re-stat'ed
        assert _counted(watch, folder) == 5 * MIB
    os.unlink(f"{folder}/growing")
    watch.tick([ME], sole=False)  # removed by the trial itself: its memory is free
    assert _counted(watch, folder) == 0
    assert watch.end([ME]) == []


def test_a_held_memfd_and_a_held_deleted_file_count_and_are_not_removed(folder):
    fd = os.memfd_create("tmpfs-watch-unit")
    try:
        os.write(fd, b"\1" * (2 * MIB))
        with open(f"{folder}/deleted", "wb") as fh:
            fh.write(b"\1" * MIB)
            fh.flush()
            os.unlink(f"{folder}/deleted")
            held = open_tmpfs_files([ME])
            sizes = sorted(
                f.memory_bytes
                for f in held.values()
                if f.path.startswith(("/memfd:tmpfs-watch-unit", folder))
            )
            assert sizes == [MIB, 2 * MIB]
            watch = TmpfsWatch(os.getuid(), folder=folder)
            watch.begin()
            watch.scan([ME], sole=True)  # held since before the trial: found at its next scan
            assert watch.memory_bytes >= 3 * MIB
            assert watch.end([ME]) == []
    finally:
        os.close(fd)


def test_files_on_a_disk_are_not_tmpfs(tmp_path):
    if os.stat(tmp_path).st_dev in tmpfs_devices():
        pytest.skip("tmp_path is on tmpfs here")
    with open(tmp_path / "disk.bin", "wb") as fh:
        fh.write(b"\1" * MIB)
        fh.flush()
        assert not any(f.path == str(tmp_path / "disk.bin") for f in open_tmpfs_files([ME]).values())


def test_a_cgroups_shmem_is_read_from_its_memory_stat(tmp_path):
    assert cgroup_shmem_bytes(None) is None
    assert cgroup_shmem_bytes(str(tmp_path)) is None  # no memory.stat: the kernel does not report it
    (tmp_path / "memory.stat").write_text("anon 4096\nfile 8192\nshmem 629145600\nshmem_thp 0\n")
    assert cgroup_shmem_bytes(str(tmp_path)) == 629145600
    watch = TmpfsWatch(os.getuid(), cgroup_path=lambda: str(tmp_path), folder=str(tmp_path))
    watch.begin()
    watch.scan([ME], sole=False)
    assert watch.cgroup_shmem == 629145600


def test_no_trial_no_watch():
    watch = TmpfsWatch(os.getuid())
    watch.tick([ME], sole=True)  # before any begin: nothing read
    assert watch.memory_bytes == 0 and watch.end() == []


def test_a_trial_that_goes_on_elsewhere_keeps_its_files(folder):
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    _write(f"{folder}/next-stage-reads-it", 1)
    watch.tick([ME], sole=True)
    assert watch.end([ME], remove=False) == []
    assert os.listdir(folder) == ["next-stage-reads-it"] and not watch.active


def test_an_end_reads_no_fds_only_when_nothing_can_have_been_made(folder, monkeypatch):
    import time

    from trainguard.process import tmpfs

    scans = []
    real = tmpfs.open_tmpfs_files
    monkeypatch.setattr(tmpfs, "open_tmpfs_files", lambda *a, **k: scans.append(1) or real(*a, **k))
    old = time.time_ns() - 10**9  # the folder last changed a second ago
    os.utime(folder, ns=(old, old))
    watch = TmpfsWatch(os.getuid(), folder=folder)
    watch.begin()
    assert watch.end([ME]) == [] and scans == []  # a trial that made nothing: one stat of the folder
    # a file made and held with no sample between start and end (a trial of a few ms): the folder
    # changed, so the end reads the tree's fds, finds it and removes it
    os.utime(folder, ns=(old, old))
    watch.begin()
    held = open(f"{folder}/quick", "wb")
    held.write(b"\1" * MIB)
    held.flush()
    removed = watch.end([ME])
    held.close()
    assert [os.path.basename(f.path) for f in removed] == ["quick"] and len(scans) == 1
    assert not os.path.exists(f"{folder}/quick")
    # a folder changed just before the trial began: its coarse mtime could hide a file made right
    # after, so the end reads the fds
    watch.begin()
    assert watch.end([ME]) == [] and len(scans) == 2
