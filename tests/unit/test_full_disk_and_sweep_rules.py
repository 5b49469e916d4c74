"""Pure decisions: which failed writes mean a full disk, and which temporary folders the sweep removes."""

from __future__ import annotations

import errno
import os
import sqlite3

import pytest

from trainguard._diskfull import LOW_FREE_BYTES, is_disk_full, sqlite_full, write_failure
from trainguard._tempdirs import Entry, owner_alive, owner_tag, stale_entries, start_ticks
from trainguard.exceptions import CheckpointError

# -- a full disk ---------------------------------------------------------------------------------------


def _raised(exc: BaseException, wrap: type[BaseException] | None = None) -> BaseException:
    try:
        try:
            raise exc
        except BaseException:
            if wrap is None:
                raise
            raise wrap("while saving the model") from None  # a framework's own error, context kept
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("exc", "wrap", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), None, {"errno": errno.ENOSPC}),
        (OSError("786432 requested and 524272 written"), None, {"errno": None}),  # np.save's short write
        (OSError(errno.EDQUOT, "Disk quota exceeded"), RuntimeError, {"errno": errno.EDQUOT}),
        (ValueError("bad shape"), None, None),
        (
            CheckpointError("stage 2 could not be written", errno=errno.ENOSPC, write_failed=True),
            None,
            {"errno": errno.ENOSPC},
        ),
        (CheckpointError("state cannot be pickled"), None, None),
    ],
)
def test_a_failed_write_is_found_in_the_exception_chain(exc, wrap, expected):
    assert write_failure(_raised(exc, wrap)) == expected


@pytest.mark.parametrize(
    ("failure", "free", "full"),
    [
        ({"errno": errno.ENOSPC}, 0, True),
        ({"errno": None}, 4096, True),  # a short write on a disk with nothing left
        ({"errno": errno.EDQUOT}, LOW_FREE_BYTES - 1, True),
        ({"errno": errno.ENOSPC}, 50 << 30, False),  # some other disk of the trial's filled up
        ({"errno": errno.EACCES}, 0, False),  # not a lack of space
        (None, 0, False),
        ({"errno": errno.ENOSPC}, None, False),  # cannot tell: a trial failure as any other
    ],
)
def test_the_checkpoints_disk_is_full_only_when_it_has_nothing_left(failure, free, full):
    assert is_disk_full(failure, free) is full


def test_sqlite_full_is_told_by_its_code_or_words():
    assert sqlite_full(sqlite3.OperationalError("database or disk is full"))
    assert not sqlite_full(sqlite3.OperationalError("database is locked"))


# -- the sweep of temporary folders ---------------------------------------------------------------------

ME, OTHER = 1000, 1001


def _alive(pid: int, ticks: int) -> bool:
    return (pid, ticks) in {(10, 500), (11, 700)}  # pid 11 also exists, started at another time


def test_only_this_users_folders_of_gone_owners_are_swept():
    entries = [
        Entry("trainguard-run-10-500-abc123", ME, True, False),  # live owner
        Entry("trainguard-run-12-500-abc123", ME, True, False),  # owner gone
        Entry("trainguard-checkpoints-11-600-x_1", ME, True, False),  # pid reused: another start time
        Entry("trainguard-ray-12-500-q", OTHER, True, False),  # another user's, owner gone
        Entry("trainguard-share-12-500-00ff", ME, True, False),
        Entry("trainguard-params-12-500-k2.json", ME, False, True),  # a command trial's params file
        Entry("trainguard-params-12-500-k3.json", ME, True, False),  # a folder under a file's name
        Entry("trainguard-bridge-12-500-l", ME, False, False),  # a link under an owned name
        Entry("trainguard-run-abc", ME, True, False),  # an old random name: no owner to ask
        Entry("trainguard-unknown-12-500-a", ME, True, False),
        Entry("pytest-of-root", ME, True, False),
    ]
    names = [e.name for e in stale_entries(entries, uid=ME, alive=_alive)]
    assert names == [
        "trainguard-run-12-500-abc123",
        "trainguard-checkpoints-11-600-x_1",
        "trainguard-share-12-500-00ff",
        "trainguard-params-12-500-k2.json",
    ]
    shares = stale_entries(entries, uid=ME, alive=_alive, kinds=("share",))
    assert [e.name for e in shares] == ["trainguard-share-12-500-00ff"]


def test_this_process_is_alive_under_its_own_tag_and_not_under_another_start_time():
    pid, ticks = (int(part) for part in owner_tag().split("-"))
    assert pid == os.getpid() and ticks == start_ticks(pid)
    assert owner_alive(pid, ticks) and not owner_alive(pid, ticks + 1)
