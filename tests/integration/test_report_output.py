"""Where ``trainguard report -o``, ``leakcheck --html`` and the comparison write: regular files
atomically, FIFOs and devices directly (never replaced), ``-`` to standard output, and default names
that never collide (issue 23, security 3)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.report import default_report_name, write_comparison
from trainguard.store import Store

RUNS = ("💥", "🔥", "sweep")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("out") / "runs.db"
    with Store(db) as s:
        for name in RUNS:
            run = s.begin_run(name, "x.py:f", [{"i": 1}], {})
            s.finish_run(run.run_id, "completed")
    return db


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as fh:
            into.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_fifo_is_written_into_and_stays_a_fifo(store, tmp_path, capsys):
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    assert main(["report", "sweep", "--store", str(store), "-o", str(fifo)]) == 0
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got and got[0].startswith(b"<!DOCTYPE html>") and got[0].rstrip().endswith(b"</html>")
    assert not list(tmp_path.glob(".trainguard-report-*"))


def test_a_link_to_a_device_writes_the_device_and_stays_a_link(store, tmp_path, capsys):
    link = tmp_path / "null.html"
    link.symlink_to("/dev/null")
    assert main(["report", "sweep", "--store", str(store), "-o", str(link)]) == 0
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    full = tmp_path / "full.html"
    full.symlink_to("/dev/full")
    assert main(["report", "sweep", "--store", str(store), "-o", str(full)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "No space left on device" in err and "Traceback" not in err
    assert full.is_symlink() and stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_link_to_a_regular_file_replaces_the_target_not_the_link(store, tmp_path, capsys):
    target = tmp_path / "real.html"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "link.html"
    link.symlink_to(target)
    assert main(["report", "sweep", "--store", str(store), "-o", str(link)]) == 0
    assert link.is_symlink() and target.read_text().startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # the file's mode kept


def test_dash_is_standard_output(store, capfd):
    assert main(["report", "sweep", "--store", str(store), "-o", "-"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("<!DOCTYPE html>") and "standard output" in err


def test_a_socket_is_refused_before_any_work(store, tmp_path, capsys):
    import socket

    path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    try:
        assert main(["report", "sweep", "--store", str(store), "-o", str(path)]) == 2
        assert "it is a socket" in capsys.readouterr().err
        with pytest.raises(ValueError, match="it is a socket"):
            write_comparison({"title": "t", "configurations": []}, str(path))
    finally:
        sock.close()


def test_default_names_of_non_ascii_runs_do_not_collide(store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "💥", "--store", str(store)]) == 0
    assert main(["report", "🔥", "--store", str(store)]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.html"))
    assert len(written) == 2 and written == sorted({default_report_name("💥"), default_report_name("🔥")})
    assert default_report_name("sweep") == "sweep.html"  # a plain name keeps its plain file
