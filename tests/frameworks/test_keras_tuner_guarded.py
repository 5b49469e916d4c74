"""trainguard.keras_tuner on real KerasTuner and Keras-TF: every trial's build-and-fit in a
guarded worker; the caller stays flat, results equal tuner.search's. Each search in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("keras_tuner")
pytest.importorskip("tensorflow")

from trainguard.leaks.stats import robust_slope  # noqa: E402

CHILD = str(Path(__file__).parent / "keras_tuner_child.py")
MiB = 2**20


def _run(mode: str, directory: Path) -> dict:
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    out = subprocess.run(
        [sys.executable, CHILD, mode, str(directory)], capture_output=True, text=True, env=env, timeout=500
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_random_search_of_5_trials_guarded_equals_tuner_search_and_keeps_the_caller_flat(tmp_path):
    guarded = _run("guarded", tmp_path / "guarded")
    plain = _run("plain", tmp_path / "plain")
    assert guarded["statuses"] == ["COMPLETED"] * 5 == plain["statuses"]
    assert guarded["best"] == plain["best"]
    # get_best_models loads the weights the worker saved in the trial's folder
    assert guarded["best_model_params"] > 0
    # no model was fitted in the caller (KerasTuner builds one there to list the search space,
    # as tuner.search does), which grew by less than 150 MiB
    assert len(guarded["build_rss"]) <= 1
    assert guarded["caller_peak_growth_bytes"] < 150 * MiB
    # tuner.search grows with every trial, clear_session() and gc.collect() notwithstanding
    rss = plain["build_rss"]
    assert len(rss) >= 5  # one per trial (and the search space's build first)
    rss = rss[-5:]
    assert robust_slope(rss).slope > 2 * MiB, [b - rss[0] for b in rss]
    # resume: the same directory, 7 trials asked: only 2 more run
    resumed = _run("resume", tmp_path / "guarded")
    assert resumed["statuses"] == ["COMPLETED"] * 7
    assert len(resumed["build_rss"]) <= 1


@pytest.mark.slow
def test_a_trial_killed_for_memory_ends_failed_with_its_cause_and_the_mixin_guards_too(tmp_path):
    killed = _run("killed", tmp_path / "killed")
    assert killed["statuses"] == ["COMPLETED", "FAILED"]
    assert len(killed["messages"]) == 1 and "memory_limit" in killed["messages"][0]
    assert "peak" in killed["messages"][0]
    mixin = _run("mixin", tmp_path / "mixin")
    assert mixin["statuses"] == ["COMPLETED", "COMPLETED"] and len(mixin["build_rss"]) <= 1
