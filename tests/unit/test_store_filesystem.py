"""The store on a network filesystem: told by statfs f_type, then SQLite's rollback journal."""

from __future__ import annotations

import sqlite3

import pytest

from trainguard.exceptions import ConfigError
from trainguard.store import Store, _fs


def test_statfs_reads_the_kernels_filesystem_type(tmp_path):
    assert _fs.statfs_type("/dev/shm") == 0x01021994  # tmpfs: a real statfs call, no seam
    assert _fs.statfs_type(str(tmp_path / "not" / "yet" / "runs.db")) == _fs.statfs_type(str(tmp_path))
    assert _fs.network_filesystem(_fs.statfs_type(str(tmp_path))) is None


@pytest.mark.parametrize(
    ("f_type", "name"),
    [
        (0x6969, "NFS"),
        (0x0BD00BD0, "Lustre"),
        (0x47504653, "GPFS"),
        (0x19830326, "BeeGFS"),
        (0xFF534D42, "CIFS"),
    ],
)
def test_network_filesystems_are_named(f_type, name):
    assert name in _fs.network_filesystem(f_type)
    assert _fs.choose_journal("auto", f_type, "runs.db") == "delete"
    assert _fs.choose_journal("auto", 0xEF53, "runs.db") == "wal"  # ext4


def test_store_on_nfs_uses_the_rollback_journal(tmp_path, monkeypatch):
    monkeypatch.setattr(_fs, "statfs_type", lambda path: 0x6969)  # the edge: what statfs would say on NFS
    with Store(tmp_path / "runs.db") as store:
        assert store.journal == "delete"
        run = store.begin_run("r", "f", [{"x": 1}], {})
        assert run is not None
    conn = sqlite3.connect(tmp_path / "runs.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert not (tmp_path / "runs.db-wal").exists() and not (tmp_path / "runs.db-shm").exists()
    with Store(tmp_path / "runs.db", readonly=True) as reader:
        assert reader.get_run("r") is not None


def test_store_on_a_local_disk_keeps_wal(tmp_path):
    with Store(tmp_path / "runs.db") as store:
        assert store.journal == "wal"
    conn = sqlite3.connect(tmp_path / "runs.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_bad_input_wal_on_a_network_filesystem_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(_fs, "statfs_type", lambda path: 0x0BD00BD0)
    with pytest.raises(
        ConfigError, match=r"is on Lustre \(statfs type 0xbd00bd0\), where SQLite's WAL"
    ) as err:
        Store(tmp_path / "runs.db", journal="wal")
    assert "\n" not in str(err.value) and "journal='auto'" in str(err.value)
    assert not (tmp_path / "runs.db").exists()
    with pytest.raises(ConfigError, match="journal='fast' is not a journal mode"):
        Store(tmp_path / "runs.db", journal="fast")


def test_a_reader_waits_for_the_schema_of_a_store_a_run_has_only_put_in_wal_mode(tmp_path):
    """A run sets WAL mode (which writes the file's header) a moment before its schema commits: a
    reader in between waits for the schema instead of calling the store empty."""
    import sqlite3
    import threading

    db = tmp_path / "s.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")  # the header is written, no table yet
    conn.close()

    def create() -> None:
        with Store(db) as store:
            store.begin_run("r", "m:f", [{"x": 0}], {})

    timer = threading.Timer(0.3, create)
    timer.start()
    try:
        with Store(db, readonly=True):  # before the fix: "is empty: nothing has been run with it yet"
            pass
    finally:
        timer.join()


def test_a_reader_waits_for_a_store_a_run_is_creating(tmp_path):
    """The file SQLite creates is empty until the creating run writes its first page: a reader
    (``show`` while a run starts) waits for it instead of calling it junk."""
    import threading

    db = tmp_path / "s.db"
    db.touch()  # what a run's first connect leaves before its schema

    def create() -> None:
        with Store(db) as store:
            store.begin_run("r", "m:f", [{"x": 0}], {})

    timer = threading.Timer(0.3, create)
    timer.start()
    try:
        with Store(db, readonly=True):  # before the fix: "is an empty file, not a trainguard store"
            pass
    finally:
        timer.join()
    with Store(db, readonly=True) as store:
        assert store.get_run("r") is not None
