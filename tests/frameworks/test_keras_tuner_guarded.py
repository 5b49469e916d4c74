"""trainguard.keras_tuner on real KerasTuner and Keras-TF: every trial's build-and-fit in a
guarded worker; the caller stays flat, results equal tuner.search's.

The five searches run one after another in one fresh process (one TensorFlow import, not five):
the guarded one first, so its caller's growth is measured in a process that has fitted nothing,
and the plain tuner.search last, so its in-process fits touch no other search's measures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("keras_tuner")
needs("tensorflow")

from trainguard.leaks.stats import robust_slope  # noqa: E402

CHILD = str(Path(__file__).parent / "keras_tuner_child.py")
MiB = 2**20
MODES = ("guarded", "resume", "killed", "mixin", "plain")


@pytest.fixture(scope="module")
def searches(tmp_path_factory) -> dict[str, dict]:
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    base = tmp_path_factory.mktemp("searches")
    out = subprocess.run(
        [sys.executable, CHILD, ",".join(MODES), str(base)],
        capture_output=True,
        text=True,
        env=env,
        timeout=560,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    found = {row["mode"]: row for row in rows}
    assert list(found) == list(MODES), out.stdout[-3000:]
    return found


@pytest.mark.slow
def test_random_search_of_5_trials_guarded_equals_tuner_search_and_keeps_the_caller_flat(searches):
    guarded, plain = searches["guarded"], searches["plain"]
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
    slope = robust_slope(rss).slope
    print(
        f"tuner.search: {slope / MiB:+.2f} MiB/trial; guarded caller peak +{guarded['caller_peak_growth_bytes'] / MiB:.0f} MiB"
    )
    assert slope > 2 * MiB, [b - rss[0] for b in rss]
    # resume: a new tuner on the guarded search's directory, 7 trials asked: only 2 more run
    resumed = searches["resume"]
    assert resumed["statuses"] == ["COMPLETED"] * 7
    assert len(resumed["build_rss"]) <= 1


@pytest.mark.slow
def test_a_trial_killed_for_memory_ends_failed_with_its_cause_and_the_mixin_guards_too(searches):
    killed = searches["killed"]
    assert killed["statuses"] == ["COMPLETED", "FAILED"]
    assert len(killed["messages"]) == 1 and "memory_limit" in killed["messages"][0]
    assert "peak" in killed["messages"][0]
    mixin = searches["mixin"]
    assert mixin["statuses"] == ["COMPLETED", "COMPLETED"] and len(mixin["build_rss"]) <= 1
