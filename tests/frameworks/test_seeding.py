"""The same start every time: with Runner(seed=...), one trial returns identical results in a fresh
worker, in a reused worker (after another trial drew from every generator) and on a retried attempt,
on torch and on Keras with the TensorFlow backend (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")
pytest.importorskip("keras")

from trainguard.runner import Policy, Runner  # noqa: E402
from trainguard.runner.worker.seeding import derive_seed  # noqa: E402
from trainguard.store import Store  # noqa: E402

TRIALS = str(Path(__file__).with_name("seeded_trials.py")) + ":draw"


def _run(tmp_path, name, params, *, seed=7, policy=None):
    policy = policy or Policy(predictive=False)
    with Runner(
        policy=policy, keras_backend="tensorflow", store=tmp_path / "s.db", threads=1, seed=seed
    ) as runner:
        results = runner.map(TRIALS, params, name=name)
        workers = runner.store.workers(runner.store.get_run(name).run_id)
    assert all(r.ok for r in results), [r.error for r in results]
    return results, workers


@pytest.mark.slow
def test_fresh_reused_and_retried_trials_start_the_same(tmp_path):
    skip = {"skip": True}  # returns at once, imports nothing
    # trial 1's first attempt runs in a fresh worker, records what it drew and crashes; its retry
    # runs in another fresh worker
    crash_file = tmp_path / "first_attempt.json"
    retried, _ = _run(
        tmp_path,
        "retried",
        [skip, {"crash_once_file": str(crash_file)}],
        policy=Policy(retries=1, max_trials_per_worker=1, predictive=False),
    )
    assert retried[1].attempts == 2
    fresh_value = json.loads(crash_file.read_text())
    # trial 1 after trial 0 drew from every generator in the same worker
    reused, reused_workers = _run(tmp_path, "reused", [{}, {}])
    assert reused[0].worker_id == reused[1].worker_id and len(reused_workers) == 1

    expected_seed = derive_seed(7, 1)
    assert retried[1].seed == reused[1].seed == expected_seed
    assert fresh_value == retried[1].value == reused[1].value
    # the two trials of a run get different seeds, so different draws
    assert reused[0].value["torch"] != reused[1].value["torch"]
    assert reused[0].value["keras"]["weights"] != reused[1].value["keras"]["weights"]

    with Store(tmp_path / "s.db", readonly=True) as store:
        run = store.get_run("reused")
        assert run.config["seed"] == 7
        assert [t.seed for t in store.trials(run.run_id)] == [derive_seed(7, 0), expected_seed]
