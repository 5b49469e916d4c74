"""trainguard.torch.Checkpointer with real torch: a loop with dropout and momentum that keeps 40 MiB
per epoch, checkpointed under a soft limit, resumes in fresh workers and ends with the uninterrupted
seeded loop's weights and generator states, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from _needs import needs

needs("torch")

from trainguard.runner import Policy, Runner  # noqa: E402
from trainguard.store import Store  # noqa: E402

TRAIN = str(Path(__file__).with_name("pressure_torch.py")) + ":train"
MiB = 2**20
PARAMS = {"epochs": 8, "leak_mib": 40, "epoch_s": 0.3}


@pytest.mark.slow
def test_a_torch_loop_checkpointed_under_pressure_ends_with_the_uninterrupted_weights(tmp_path):
    db = tmp_path / "t.db"
    with Runner(store=db, threads=1) as runner:
        (plain,) = runner.map(TRAIN, [PARAMS], name="plain")
    assert plain.ok, plain.error
    soft = plain.value["first_rss"] + 150 * MiB  # pressure after about 4 epochs, in each worker
    with Runner(store=db, threads=1, policy=Policy(soft_limit=soft)) as runner:
        (pressed,) = runner.map(TRAIN, [PARAMS], name="pressed")
    assert pressed.ok, pressed.error
    assert pressed.value["resumed"] is True
    assert pressed.value["weights"] == plain.value["weights"]
    assert pressed.value["numpy"] == plain.value["numpy"]  # numpy's generator carried over too
    with Store(db, readonly=True) as store:
        statuses = [a.status for a in store.attempts(store.get_run("pressed").run_id)]
    assert statuses.count("staged") >= 1 and statuses[-1] == "ok"
