"""The same start every time: with Runner(seed=...), one trial returns identical results in a fresh
worker, in a reused worker (after another trial drew from every generator) and on a retried attempt,
on torch and on Keras with the TensorFlow backend (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _needs import needs

needs("torch")
needs("tensorflow")
needs("keras")

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
    # one run, two TensorFlow workers (each costs about 10 CPU seconds to start): trial 0 draws
    # from every generator in worker A; trial 1's first attempt runs after it in A (reused),
    # records what it drew and crashes; its retry runs in worker B, fresh
    crash_file = tmp_path / "first_attempt.json"
    results, workers = _run(
        tmp_path,
        "seeded",
        [{}, {"crash_once_file": str(crash_file)}],
        policy=Policy(retries=1, predictive=False),
    )
    assert results[1].attempts == 2 and len(workers) == 2
    reused_value = json.loads(crash_file.read_text())
    with Store(tmp_path / "s.db", readonly=True) as store:
        run = store.get_run("seeded")
        first, retry = store.attempts(run.run_id, 1)
        assert run.config["seed"] == 7
        trial_seeds = [t.seed for t in store.trials(run.run_id)]
    worker_a, worker_b = (w.worker_id for w in workers)
    assert results[0].worker_id == first.worker_id == worker_a
    assert retry.worker_id == results[1].worker_id == worker_b

    expected_seed = derive_seed(7, 1)
    assert results[1].seed == expected_seed
    # reused (first attempt, after trial 0) == fresh and retried (second attempt, new worker)
    assert reused_value == results[1].value
    # the two trials of a run get different seeds, so different draws
    assert results[0].value["torch"] != results[1].value["torch"]
    assert results[0].value["keras"]["weights"] != results[1].value["keras"]["weights"]
    assert trial_seeds == [derive_seed(7, 0), expected_seed]
