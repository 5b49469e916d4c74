"""Another user's ``show`` in a shared sticky folder leaves no -wal/-shm files the store's owner
cannot delete (issue 23, item 8). Needs root to be another user for a moment (os.setuid in a child)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from trainguard.store import Store


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_another_users_show_leaves_no_side_files():
    shared = Path(tempfile.mkdtemp(prefix="tg-sticky-", dir="/tmp"))
    try:
        shared.chmod(0o1777)
        db = shared / "runs.db"
        with Store(db) as store:
            run = store.begin_run("r", "x:y", [{}], {})
            store.finish_run(run.run_id, "completed")
        for side in ("-wal", "-shm"):
            Path(str(db) + side).unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:  # the other user: read the store as `show` does, then leave at once
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                with Store(db, readonly=True) as store:
                    code = 0 if store.get_run("r") is not None and store.list_runs() else 2
            finally:
                os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
        left = [p.name for p in shared.iterdir() if p.name != "runs.db" and p.stat().st_uid == 65534]
        assert left == []
    finally:
        shutil.rmtree(shared, ignore_errors=True)
