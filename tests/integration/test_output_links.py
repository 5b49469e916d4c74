"""Output files the user names (``report -o``, ``leakcheck --html``/``--plot``, ``compare --html``)
are never written through a link another user planted (issue 34, item 3).

Root plays the victim; ``nobody`` plants its links and FIFOs with ``setpriv`` in a shared sticky
folder under /tmp, as a hostile local user would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.exceptions import ConfigError
from trainguard.report import check_output_path
from trainguard.store import Store

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting as another user needs root")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may add names to, as /tmp is (sticky, mode 1777)."""
    folder = Path(tempfile.mkdtemp(prefix="tg-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of root's that nobody may write."""
    target = tmp_path / "precious.conf"
    target.write_text("root's own\n")
    target.chmod(0o644)
    return target


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    with Store(db) as s:
        run = s.begin_run("sweep", "x.py:f", [{"i": 1}], {})
        s.finish_run(run.run_id, "completed")
    return db


def _as_nobody(*command: str) -> None:
    subprocess.run([*AS_NOBODY, *command], check=True, timeout=30)


@needs_root
def test_report_refuses_a_link_nobody_planted_and_the_target_is_untouched(shared, victim, store, tmp_path):
    link = shared / "report.html"
    _as_nobody("ln", "-s", str(victim), str(link))
    done = subprocess.run(
        [sys.executable, "-m", "trainguard", "report", "sweep", "--store", str(store), "-o", str(link)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "symbolic link that is owned by uid 65534 (nobody)" in lines[0] and f"rm {link}" in lines[0]
    assert victim.read_text() == "root's own\n"
    assert link.is_symlink()


@needs_root
@pytest.mark.parametrize("flag", ["-o", "--html", "--plot"])
def test_every_output_refuses_a_link_nobody_planted(shared, victim, flag):
    from trainguard._safe_write import write_output_file
    from trainguard.leaks.plot import check_plot_path

    link = shared / ("leak.png" if flag == "--plot" else "out.html")
    _as_nobody("ln", "-s", str(victim), str(link))
    with pytest.raises(ConfigError, match=r"owned by uid 65534 \(nobody\)"):
        check_plot_path(str(link)) if flag == "--plot" else check_output_path(link, flag=flag)
    with pytest.raises(ConfigError, match="symbolic link"):
        write_output_file(link, b"<html>", flag=flag, what="the report")
    assert victim.read_text() == "root's own\n"


@needs_root
def test_a_folder_on_the_way_that_is_nobodys_link_is_refused(shared, tmp_path):
    from trainguard._safe_write import write_output_file

    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    _as_nobody("ln", "-s", str(elsewhere), str(shared / "reports"))
    with pytest.raises(ConfigError, match="on its way is a symbolic link"):
        write_output_file(shared / "reports" / "cron", b"* * * * * root sh\n", flag="-o", what="the report")
    assert list(elsewhere.iterdir()) == []


@needs_root
def test_a_fifo_nobody_made_is_refused(shared):
    fifo = shared / "out.html"
    _as_nobody("mkfifo", str(fifo))
    with pytest.raises(ConfigError, match="FIFO or device that is owned by uid 65534"):
        check_output_path(fifo)


def test_a_link_planted_after_the_check_is_replaced_not_followed(tmp_path, victim):
    # the write itself renames over the name: a link that appeared there since is replaced
    from trainguard._safe_write import _replace_atomically

    target = tmp_path / "out.html"
    target.symlink_to(victim)
    _replace_atomically(target, b"<html>report</html>")
    assert not target.is_symlink() and target.read_bytes() == b"<html>report</html>"
    assert victim.read_text() == "root's own\n"


def test_your_own_link_is_still_followed(tmp_path):
    from trainguard._safe_write import write_output_file

    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    write_output_file(link, b"new", flag="-o", what="the report")
    assert link.is_symlink() and real.read_text() == "new"
