"""A full disk under the store or the checkpoints, on a real 4 MiB tmpfs: the run stops with one
line that says which disk filled up, the half-written checkpoint is gone, the run's status is
``disk_full`` (never ``running``), nothing recorded before is lost, and the run resumes once space
is freed."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from trainguard import Runner
from trainguard.exceptions import DiskFullError
from trainguard.store import Store

TRIALS = str(Path(__file__).parents[1] / "catalogue" / "catalogue_trials.py")


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _no_tracebacks(caplog) -> None:
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_a_checkpoint_bigger_than_the_disk_stops_the_run_and_resumes_after_space_is_freed(small_disk, caplog):
    store = small_disk.path / "runs.db"
    caplog.set_level(logging.WARNING)
    with pytest.raises(DiskFullError) as info, Runner(store=store) as runner:
        runner.map(f"{TRIALS}:big_checkpoint", [{"mb": 8}], name="big")
    message = str(info.value)
    assert "\n" not in message
    # the store and the checkpoints share this disk: the checkpoint's write fills it, and either
    # that write or the supervisor's next write to the store is the one that fails first
    by_checkpoint = (
        f"the disk under {store}.checkpoints (the run's checkpoints) filled up while trial 0 wrote"
    )
    by_store = f"the disk under {small_disk.path} (the store {store}"
    assert by_checkpoint in message or by_store in message, message
    assert "free space there" in message and "resume" in message
    if by_checkpoint in message:
        assert "checkpoints are kept" in message
    _no_tracebacks(caplog)
    # the half-written checkpoint is gone; the committed stage is kept; nothing else is left
    left = _files(small_disk.path)
    assert not [f for f in left if "/next" in f] and any(f.endswith("stage-1/w.npy") for f in left), left
    assert not [f for f in left if ".locks" in f], left  # the lock and its reserve went with the run
    with Store(store, readonly=True) as s:
        run = s.get_run("big")
        assert run.status == "disk_full"
        assert [a.status for a in s.attempts(run.run_id)] == ["disk_full"]
        assert [t.status for t in s.trials(run.run_id)] == ["pending"]
    small_disk.resize("64m")  # space freed
    with Runner(store=store) as runner:
        [result] = runner.map(f"{TRIALS}:big_checkpoint", [{"mb": 8}], name="big")
    assert result.ok and result.value == {"resumed": True}, result.error
    assert _files(small_disk.path) == ["runs.db"]


def test_the_store_filling_up_while_recording_a_result_keeps_what_was_recorded(small_disk, caplog):
    store = small_disk.path / "runs.db"
    filler = small_disk.path / "filler"
    params = [{"x": i, "filler": str(filler)} for i in range(3)]
    caplog.set_level(logging.WARNING)
    with pytest.raises(DiskFullError) as info, Runner(store=store) as runner:
        done = []
        for result in runner.imap(f"{TRIALS}:fills_disk", params, name="fill"):
            done.append(result)
    message = str(info.value)
    assert "\n" not in message and message.startswith("run fill stopped: the disk under ")
    assert f"(the store {store}) is full" in message and "free space there" in message
    _no_tracebacks(caplog)
    assert [r.index for r in done] == [0]
    with Store(store, readonly=True) as s:
        run = s.get_run("fill")
        assert run.status == "disk_full"  # recorded with the reserve the run kept
        trials = s.trials(run.run_id)
        assert trials[0].status == "ok" and trials[0].value == {"x": 0, "text": "y" * 20_000}
        assert [t.status for t in trials[1:]] == ["pending", "pending"]
    os.truncate(filler, 0)  # space freed
    with Runner(store=store) as runner:
        again = runner.map(f"{TRIALS}:fills_disk", params, name="fill")
    assert [r.ok for r in again] == [True] * 3 and [r.reused for r in again] == [True, False, False]


def test_a_run_does_not_start_on_a_disk_without_room_for_its_reserve(small_disk):
    store = small_disk.path / "runs.db"
    Store(store).close()
    fd = os.open(small_disk.path / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    with pytest.raises(DiskFullError) as info, Runner(store=store) as runner:
        runner.map(f"{TRIALS}:echo", [{"x": 1}], name="none")
    assert "\n" not in str(info.value) and f"the disk under {small_disk.path}" in str(info.value)
    assert sorted(os.listdir(small_disk.path)) in (
        ["filler", "runs.db"],
        ["filler", "runs.db", "runs.db-shm", "runs.db-wal"],
    )
