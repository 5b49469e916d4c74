"""Staged trials: fn(params, ctx) with ctx.checkpoint/restore; the policy ends a worker at a stage
boundary and a fresh one resumes; a killed supervisor's trial resumes from its last checkpoint on the
next run; a deleted checkpoint makes the trial start over, said in its record; bad input is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _waits import wait_for
from trainguard.cli import main
from trainguard.exceptions import CheckpointError
from trainguard.runner import Policy, Runner, TrialContext
from trainguard.store import Store

HERE = Path(__file__).parent
STAGED = str(HERE / "stage_trials.py") + ":staged"
MiB = 2**20


def _stages(store_path, name):
    with Store(store_path, readonly=True) as store:
        run = store.get_run(name)
        return store.stages(run.run_id), store.attempts(run.run_id)


def test_max_stages_per_worker_moves_the_trial_to_fresh_workers(tmp_path, capsys):
    db = tmp_path / "s.db"
    with Runner(store=db, policy=Policy(max_stages_per_worker=2)) as runner:
        (result,) = runner.map(STAGED, [{"stages": 5, "check_file": True}], name="r")
    assert result.ok, result.error
    # the sum of 0..4 whatever worker ran which stage; three workers, each resuming the last
    assert result.value == {"total": 10, "workers": 3, "restart": None}
    stages, attempts = _stages(db, "r")
    assert [(s.event, s.stage, s.worker_id) for s in stages] == [
        ("checkpoint", 1, 0),
        ("checkpoint", 2, 0),
        ("resume", 2, 1),
        ("checkpoint", 3, 1),
        ("checkpoint", 4, 1),
        ("resume", 4, 2),
        ("checkpoint", 5, 2),
    ]
    assert [a.status for a in attempts] == ["staged", "staged", "ok"]
    assert not (tmp_path / "s.db.checkpoints").exists()  # removed when the trial finished
    assert main(["show", "r", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "stages of staged trials" in out and "resumed from" in out
    assert main(["show", "r", "--store", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(s["event"], s["stage"], s["worker_id"]) for s in shown["stages"]][:3] == [
        ("checkpoint", 1, 0),
        ("checkpoint", 2, 0),
        ("resume", 2, 1),
    ]


def test_predicted_growth_ends_the_worker_at_a_boundary(tmp_path):
    db = tmp_path / "s.db"
    params = [{"stages": 12, "leak_mib": 24, "sleep_s": 0.3}]
    with Runner(store=db, policy=Policy(peak_ratio=1.5)) as runner:
        (staged,) = runner.map(STAGED, params, name="staged")
    with Runner(store=db, policy=Policy(predictive=False)) as runner:
        (plain,) = runner.map(STAGED, params, name="plain")
    assert staged.ok and plain.ok and staged.value["total"] == plain.value["total"] == sum(range(12))
    assert plain.value["workers"] == 1 and staged.value["workers"] > 1
    stages, _ = _stages(db, "staged")
    peaks = [s.peak_rss_bytes for s in stages if s.event == "checkpoint"]
    plain_peaks = [s.peak_rss_bytes for s in _stages(db, "plain")[0] if s.event == "checkpoint"]
    # the unstaged trial grows by 24 MiB a stage; the staged one stays within its budget
    assert plain_peaks[-1] > plain_peaks[0] + 200 * MiB
    assert max(peaks) < 1.5 * peaks[0] + 24 * MiB


def test_killed_supervisor_resumes_from_the_last_checkpoint(tmp_path):
    db = tmp_path / "s.db"
    script = tmp_path / "sup.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import trainguard
            with trainguard.Runner(store={str(db)!r}) as runner:
                runner.map({STAGED!r}, [{{"stages": 6, "sleep_s": 0.6}}], name="k")
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    wait_for(
        lambda: any(s.event == "checkpoint" and s.stage >= 2 for s in _stages(db, "k")[0]),
        120,
        "stage 2's checkpoint",
        ignore=(Exception,),  # the store or the run not written yet
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    committed = max(s.stage for s in _stages(db, "k")[0] if s.event == "checkpoint")
    assert 2 <= committed < 6
    with Runner(store=db) as runner:
        (result,) = runner.map(STAGED, [{"stages": 6, "sleep_s": 0.6}], name="k")
    assert result.ok and result.value["total"] == sum(range(6))
    stages, _ = _stages(db, "k")
    resumed = [s for s in stages if s.event == "resume"]
    assert resumed and resumed[0].stage >= committed


def test_a_deleted_checkpoint_starts_the_trial_over_and_says_so(tmp_path):
    db = tmp_path / "s.db"
    with Runner(store=db, policy=Policy(max_stages_per_worker=2)) as runner:
        runner.map(STAGED, [{"stages": 2}], name="d")  # finishes: its folder is gone, its rows stay
    with Store(db) as store:
        run = store.get_run("d")
        # a later session of a run whose trial committed stage 2 and whose files were then deleted
        store.add_stage(run.run_id, 0, 1, 2, event="checkpoint", worker_id=0)
        run_uuid = store.run_uuid(run.run_id)
    from trainguard.runner._checkpoint_safety import ensure_private_dirs
    from trainguard.runner.session._stages import CheckpointFolders, prepare_resume

    folders = CheckpointFolders(db, run_uuid)
    ensure_private_dirs(folders.trial_dir(0), folders.levels)
    os.mkdir(os.path.join(folders.trial_dir(0), "stage-2"))  # the folder without its files
    assert prepare_resume(folders, 0, 2)[1].startswith("the checkpoint of stage 2 is unusable")
    assert prepare_resume(folders, 0, 2)[1].startswith("the checkpoint of stage 2 is gone")


def test_a_checkpoint_file_deleted_between_sessions_falls_back_to_starting_over(tmp_path):
    db = tmp_path / "s.db"
    script = tmp_path / "sup.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import trainguard
            with trainguard.Runner(store={str(db)!r}) as runner:
                runner.map({STAGED!r}, [{{"stages": 4, "sleep_s": 0.6, "check_file": True}}], name="f")
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)])
    wait_for(
        lambda: list((tmp_path / "s.db.checkpoints").glob("run-*/trial-0/stage-*/weights.bin")),
        120,
        "a stage's weights.bin",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for path in (tmp_path / "s.db.checkpoints").glob("run-*/trial-0/stage-*/weights.bin"):
        path.unlink()  # the user's checkpoint file is gone
    with Runner(store=db) as runner:
        (result,) = runner.map(STAGED, [{"stages": 4, "sleep_s": 0.6, "check_file": True}], name="f")
    assert result.ok, result.error
    assert "was deleted" in result.value["restart"]
    stages, _ = _stages(db, "f")
    restart = [s for s in stages if s.event == "restart"]
    assert len(restart) == 1 and "weights.bin was deleted" in restart[0].note
    with Store(db, readonly=True) as store:
        events = store.events(store.get_run("f").run_id)
    assert any(e.kind == "stage_restart" and "starts over" in e.message for e in events)


def test_bad_checkpoints_are_one_line(tmp_path):
    with Runner(store=tmp_path / "s.db") as runner:
        unpicklable, no_restore = runner.map(
            str(HERE / "stage_trials.py") + ":bad_checkpoint", [{"kind": "unpicklable"}, {"kind": "restore"}]
        )
    assert "ctx.checkpoint(state): the state cannot be saved" in unpicklable.error.message
    assert "no checkpoint to restore" in no_restore.error.message
    for r in (unpicklable, no_restore):
        assert r.error.exc_type.endswith("CheckpointError") and "\n" not in r.error.message
    ctx = TrialContext(index=0, attempt=1)
    with pytest.raises(CheckpointError, match="needs a checkpoint folder"):
        ctx.checkpoint({"a": 1})
    assert ctx.restore(default=None) is None


def test_run_max_stages_per_worker_flag(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    params = tmp_path / "p.json"
    params.write_text('[{"stages": 3, "hint": true}]')
    argv = ["-q", "run", STAGED, "--params", str(params), "--store", db, "--name", "c"]
    assert main([*argv, "--max-stages-per-worker", "0"]) == 2
    assert "max_stages_per_worker=0 must be a whole number >= 1" in capsys.readouterr().err
    assert main([*argv, "--max-stages-per-worker", "1"]) == 0
    stages, attempts = _stages(db, "c")
    assert [a.status for a in attempts] == ["staged", "staged", "ok"]
    assert {s.worker_id for s in stages if s.event == "checkpoint"} == {0, 1, 2}
