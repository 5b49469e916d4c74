"""Memory pressure and the flight recorder with real workers: a training that keeps 40 MiB per
epoch under memory_limit=700MB, soft_limit=450MB checkpoints when ctx.under_pressure is set and
ends ok in fresh workers with the unlimited run's result; the same training ignoring the flag is
killed at the hard limit with a flight recorder of its last seconds; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.runner import Policy, Runner
from trainguard.store import Store

HERE = Path(__file__).parent
TRAIN = str(HERE / "pressure_trials.py") + ":leaky_training"
PARAMS = {"epochs": 22, "keep_mib": 40, "epoch_s": 0.3}
LIMITS = {"memory_limit": "700MB", "soft_limit": "450MB"}

pytestmark = pytest.mark.slow


def _recorded(db: Path, name: str):
    with Store(db, readonly=True) as store:
        run = store.get_run(name)
        return (
            store.attempts(run.run_id),
            store.events(run.run_id, kinds=["pressure"]),
            store.stages(run.run_id),
        )


@pytest.fixture(scope="module")
def unlimited_value(tmp_path_factory):
    with Runner(store=tmp_path_factory.mktemp("unlimited") / "u.db") as runner:
        (result,) = runner.map(TRAIN, [PARAMS], name="unlimited")
    assert result.ok, result.error
    return result.value


def test_a_training_that_reads_the_flag_checkpoints_and_ends_ok_in_fresh_workers(
    tmp_path, unlimited_value, capsys
):
    db = tmp_path / "p.db"
    with Runner(store=db, policy=Policy(**LIMITS)) as runner:
        (result,) = runner.map(TRAIN, [PARAMS], name="listens")
    assert result.ok, result.error
    assert result.value["total"] == unlimited_value["total"] and result.value["epochs"] == 22
    assert result.value["resumed"] is True and result.value["pid"] != unlimited_value["pid"]
    attempts, pressure, stages = _recorded(db, "listens")
    statuses = [a.status for a in attempts]
    assert "killed_memory" not in statuses and statuses[-1] == "ok" and statuses.count("staged") >= 1
    assert all(a.peak_rss_bytes < 700e6 for a in attempts)
    assert [e.data["action"] for e in pressure] == ["checkpointed"] * statuses.count("staged")
    assert any(s.event == "resume" for s in stages)
    assert main(["show", "listens", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "memory pressure" in out and "checkpointed stage 1" in out


def test_the_same_training_ignoring_the_flag_is_killed_with_a_flight_recorder(tmp_path, capsys):
    db = tmp_path / "q.db"
    with Runner(store=db, policy=Policy(**LIMITS)) as runner:
        (result,) = runner.map(TRAIN, [{**PARAMS, "listen": False}], name="ignores")
    assert result.status == "failed" and result.error.status == "killed_memory"
    assert result.error.flight_recorder is None  # on the attempt, not the trial's error
    attempts, pressure, _ = _recorded(db, "ignores")
    (attempt,) = attempts
    recorder = attempt.error.flight_recorder
    assert len(recorder["samples"]) >= 20
    assert recorder["cause"] == "killed_memory" and recorder["growth_bytes_per_s"] > 20 * 2**20
    assert recorder["samples"][-1]["t_s"] == 0 and recorder["samples"][0]["t_s"] < -2
    assert recorder["processes"] and recorder["processes"][0]["rss_bytes"] > 450e6
    assert [e.data["action"] for e in pressure] == ["ignored"]
    assert pressure[0].data["work_lost_s"] > 2
    assert main(["show", "ignores", "--store", str(db)]) == 0
    assert capsys.readouterr().out.count("pressure ignored; killed at the hard limit") == 1
    assert main(["show", "ignores", "--store", str(db), "--trial", "0"]) == 0
    out = capsys.readouterr().out
    assert "flight recorder:" in out and "samples over the last" in out
    assert main(["show", "ignores", "--store", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["attempts"][0]["flight_recorder"]["samples"]) >= 20
    assert "flight_recorder" not in (shown["attempts"][0]["error"] or {})


def test_a_checkpoint_under_pressure_that_fails_fails_the_attempt_and_keeps_the_earlier_one(tmp_path):
    db = tmp_path / "f.db"
    params = {**PARAMS, "epochs": 14, "checkpoint_at": [2], "unpicklable_under_pressure": True}
    # pressure from the soft limit only (epoch 10 or so): a growth-rate prediction could come as
    # early as the regular checkpoint after epoch 2 on a slow machine, and this test is about
    # what happens to that checkpoint
    policy = Policy(**LIMITS, retries=1, retry_on=("exception",), pressure_horizon=0)
    with Runner(store=db, policy=policy) as runner:
        (result,) = runner.map(TRAIN, [params], name="fails")
    attempts, pressure, stages = _recorded(db, "fails")
    first = attempts[0]
    assert first.status == "exception"
    assert "CheckpointError" in first.error.message and "cannot be saved" in first.error.message
    assert pressure[0].data["action"] == "checkpoint_failed"
    # the earlier checkpoint was kept: the retry resumed from it, not from the start
    assert [s.stage for s in stages if s.event == "checkpoint" and s.attempt == 1] == [1]
    assert any(s.event == "resume" and s.attempt == 2 and s.stage == 1 for s in stages)
    assert attempts[1].status == "exception"  # it fails the same way under pressure again


def test_soft_limit_at_or_over_memory_limit_is_one_line_before_the_run(tmp_path):
    db = tmp_path / "b.db"
    grid = tmp_path / "grid.json"
    grid.write_text('[{"epochs": 1}]')
    for soft in ("700MB", "900MB", "-5MB"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainguard",
                "run",
                TRAIN,
                "--store",
                str(db),
                "--memory-limit",
                "700MB",
                f"--soft-limit={soft}",
                "--params",
                str(grid),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode != 0
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "soft_limit" in lines[0], proc.stderr
        assert (
            ("negative" in lines[0]) if soft.startswith("-") else ("must be under memory_limit" in lines[0])
        )
    assert not db.exists() or not Store(db, readonly=True).list_runs()


def test_pressure_grace_ends_a_trial_that_does_not_checkpoint(tmp_path):
    db = tmp_path / "g.db"
    policy = Policy(memory_limit="2GB", soft_limit="450MB", pressure_grace="1s")
    with Runner(store=db, policy=policy) as runner:
        (result,) = runner.map(TRAIN, [{**PARAMS, "listen": False}], name="grace")
    assert result.status == "failed" and result.error.status == "killed_memory"
    assert "pressure_grace" in result.error.message
    attempts, pressure, _ = _recorded(db, "grace")
    assert attempts[0].peak_rss_bytes < 1.5e9  # ended well under the hard limit
    assert [e.data["action"] for e in pressure] == ["grace_expired"]
    assert len(attempts[0].error.flight_recorder["samples"]) >= 20
