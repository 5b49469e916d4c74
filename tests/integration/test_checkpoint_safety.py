"""Checkpoint folders another user planted, swapped or redirected, and checkpoints of another run
or with altered content (issue 23, security 1-2; staged trials 15)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainguard import Runner
from trainguard.exceptions import CheckpointError
from trainguard.runner import Policy
from trainguard.runner._checkpoint_safety import ensure_private_dirs, remove_private
from trainguard.runner.session._stages import CheckpointFolders, prepare_resume
from trainguard.runner.worker.context import TrialContext
from trainguard.store import Store

HERE = Path(__file__).parent
STAGED = str(HERE / "stage_trials.py") + ":staged"
KEPT = str(HERE / "stage_trials.py") + ":kept_path"


def _plant(folder: Path) -> None:
    """A folder as another user leaves it in a shared sticky directory: mode 0777, their own."""
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)


def test_a_planted_checkpoint_folder_is_refused_before_any_trial_runs(tmp_path):
    planted = tmp_path / "s.db.checkpoints"
    _plant(planted)
    (planted / "run-1" / "trial-0" / "stage-1").mkdir(parents=True)
    with pytest.raises(CheckpointError) as info, Runner(store=tmp_path / "s.db") as runner:
        runner.map(STAGED, [{"stages": 2}], name="fresh")
    message = str(info.value)
    assert "\n" not in message and str(planted) in message
    assert ("owned by uid 65534" in message) if os.geteuid() == 0 else ("mode is 0777" in message)
    with Store(tmp_path / "s.db", readonly=True) as store:
        assert not store.trials(store.get_run("fresh").run_id)[0].status == "ok"


def test_a_symlink_as_the_checkpoint_folder_is_refused(tmp_path):
    victim = tmp_path / "victim"
    (victim / "trial-0").mkdir(parents=True)
    (tmp_path / "s.db.checkpoints").symlink_to(victim)
    with pytest.raises(CheckpointError, match="symbolic link"), Runner(store=tmp_path / "s.db") as runner:
        runner.map(STAGED, [{"stages": 1}], name="x")
    assert (victim / "trial-0").is_dir()


def test_removing_a_trial_never_follows_a_link_under_the_checkpoint_root(tmp_path):
    base = tmp_path / "s.db.checkpoints"
    base.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    (victim / "trial-0").mkdir(parents=True)
    (victim / "trial-0" / "precious").write_text("keep")
    (base / "run-abc").symlink_to(victim)  # planted where the run's folder goes
    remove_private(str(base / "run-abc" / "trial-0"), 3)
    assert (victim / "trial-0" / "precious").read_text() == "keep"
    (base / "run-abc").unlink()
    (base / "run-abc").mkdir(mode=0o700)
    (base / "run-abc" / "trial-0").symlink_to(victim / "trial-0")  # the trial's folder itself a link
    remove_private(str(base / "run-abc" / "trial-0"), 3)
    assert (victim / "trial-0" / "precious").read_text() == "keep"
    assert not (base / "run-abc" / "trial-0").exists()  # the link went, not what it pointed to


def test_checkpoint_folders_are_created_private(tmp_path):
    with Runner(store=tmp_path / "s.db", policy=Policy(max_stages_per_worker=1)) as runner:
        (result,) = runner.map(KEPT, [{"stages": 3}], name="k")
    assert result.ok and result.value == 3, result.error  # a kept ctx.checkpoint_path keeps working
    with Store(tmp_path / "s.db", readonly=True) as store:
        run_id = store.get_run("k").run_id
        attempts = store.attempts(run_id, 0)
        (row,) = store.trials(run_id)
    assert [a.status for a in attempts] == [
        "staged",
        "staged",
        "staged",
        "ok",
    ]  # it checkpoints its last stage too
    # the trial's row: its whole time and peak over the three workers, not the last stage's
    assert row.duration_s == pytest.approx(sum(a.duration_s for a in attempts))
    assert row.peak_rss_bytes == max(a.peak_rss_bytes for a in attempts)
    trial = tmp_path / "t" / "run-u" / "trial-0"
    os.umask(old := os.umask(0o022))
    ensure_private_dirs(str(trial), 3)
    for folder in (trial, trial.parent, trial.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (trial.parent).chmod(0o755)
    with pytest.raises(CheckpointError, match="mode is 0755"):
        ensure_private_dirs(str(trial), 3)
    os.umask(old)


def _committed(root: str, run_uuid: str, content: bytes) -> TrialContext:
    ctx = TrialContext(index=0, attempt=1, checkpoint_root=root, checkpoint_levels=3, run_uuid=run_uuid)
    Path(ctx.checkpoint_path, "weights.bin").write_bytes(content)
    ctx.checkpoint({"stage": 1})
    return ctx


def test_a_new_store_never_resumes_the_checkpoints_an_old_one_left(tmp_path):
    db = tmp_path / "s.db"
    with Store(db) as store:
        run = store.begin_run("old", "x:y", [{}], {})
        old_uuid = store.run_uuid(run.run_id)
    old = CheckpointFolders(db, old_uuid)
    _committed(old.trial_dir(0), old_uuid, b"\x01" * 1000)
    db.unlink()  # the store is deleted, its checkpoints folder kept
    with Store(db) as store:
        run = store.begin_run("new", "a:b", [{"other": 1}], {})
        assert run.run_id == 1
        new_uuid = store.run_uuid(run.run_id)
    assert new_uuid != old_uuid
    new = CheckpointFolders(db, new_uuid)
    assert prepare_resume(new, 0, None) == (None, None)
    # even the old stage copied into the new run's folder is refused: its manifest names its run
    ensure_private_dirs(new.trial_dir(0), 3)
    os.rename(os.path.join(old.trial_dir(0), "stage-1"), os.path.join(new.trial_dir(0), "stage-1"))
    stage, why = prepare_resume(new, 0, None)
    assert stage is None and "written by another run" in why


def test_same_size_altered_or_garbage_checkpoints_start_over(tmp_path):
    db = tmp_path / "s.db"
    folders = CheckpointFolders(db, "u" * 32)
    ctx = _committed(folders.trial_dir(0), folders.run_uuid, b"\x01" * 1000)
    stage_dir = Path(ctx.restore_path)
    assert prepare_resume(folders, 0, 1) == (1, None)
    (stage_dir / "weights.bin").write_bytes(b"\x02" * 1000)  # same size, other weights
    stage, why = prepare_resume(folders, 0, 1)
    assert stage is None and "content hash differs" in why and not stage_dir.exists()
    ctx = _committed(folders.trial_dir(0), folders.run_uuid, b"\x01" * 1000)
    state = Path(ctx.restore_path, "state.pkl")
    state.write_bytes(b"\x00" * state.stat().st_size)  # same-size garbage where the pickle was
    stage, why = prepare_resume(folders, 0, 1)
    assert stage is None and "state.pkl changed" in why
