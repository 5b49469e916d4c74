"""A store another user could have written is refused, by a run (a resume would reuse its results)
and by ``show`` (issue 34, item 6). Root plays the victim; ``nobody`` (uid 65534) the other user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.exceptions import StoreError
from trainguard.store import Store

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")

HERE = Path(__file__).parent


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainguard", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _store_with_a_run(path: Path) -> None:
    with Store(path) as store:
        run = store.begin_run("r", "x.py:f", [{"x": 1}], {})
        store.finish_trial(
            run.run_id,
            0,
            status="ok",
            value={"loss": 0.1},
            error=None,
            attempts=1,
            peak_rss_bytes=None,
            worker_id=None,
            duration_s=0.1,
        )
        store.finish_run(run.run_id, "completed")


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@needs_root
def test_a_store_folder_another_user_owns_and_all_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    _store_with_a_run(shared / "runs.db")
    os.chown(shared, NOBODY, NOBODY)
    shared.chmod(0o777)
    for args in (["show", "r"], ["runs"], ["report", "r", "-o", str(tmp_path / "r.html")]):
        done = _cli(*args, "--store", str(shared / "runs.db"), cwd=tmp_path)
        assert done.returncode != 0, args
        line = _one_line(done.stderr)
        assert "refusing store" in line and f"its folder {shared}" in line, line
        assert "uid 65534 (nobody)" in line and "--store ~/trainguard.db" in line
    with pytest.raises(StoreError, match="uid 65534 \\(nobody\\)"):
        Store(shared / "runs.db")  # a run (and its resume) opens it to write: refused the same
    assert not (tmp_path / "r.html").exists()


@needs_root
def test_a_store_file_another_user_owns_is_refused_for_a_resume(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)  # as if nobody had forged it: theirs, in the victim's folder
    os.chown(db, NOBODY, NOBODY)
    with pytest.raises(StoreError) as info:
        Store(db)
    message = str(info.value)
    assert "\n" not in message and "the file is owned by uid 65534 (nobody)" in message
    assert "could have forged its results" in message


def test_a_world_writable_store_is_refused_to_readers_too(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    db.chmod(0o666)
    done = _cli("show", "r", "--store", str(db), cwd=tmp_path)
    assert done.returncode != 0
    assert "has mode 0666, which lets every user write it" in _one_line(done.stderr)


def test_a_planted_wal_file_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    wal = tmp_path / "runs.db-wal"
    wal.write_bytes(b"")
    wal.chmod(0o666)
    with pytest.raises(StoreError, match="its wal file runs.db-wal has mode 0666"):
        Store(db, readonly=True)


@needs_root
def test_another_users_store_in_a_sticky_folder_is_still_read(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    db = sticky / "runs.db"
    _store_with_a_run(db)
    for side in ("-wal", "-shm"):
        Path(str(db) + side).unlink(missing_ok=True)
    os.chown(db, NOBODY, NOBODY)
    with Store(db, readonly=True) as store:  # a colleague's store: theirs alone to write
        assert store.get_run("r") is not None
    with pytest.raises(StoreError, match="owned by uid 65534"):
        Store(db)  # but not resumed into: its results are not ours


def test_your_own_store_in_a_private_folder_opens(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    with Store(db) as store:
        assert store.get_run("r") is not None
