"""MemoryCallback(action="checkpoint") with real Keras: a fit that keeps 40 MiB per epoch under a
soft limit saves model and optimizer at the end of the epoch under pressure, resumes from that
epoch in fresh workers, and ends with the uninterrupted seeded fit's weights, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from _needs import needs

needs("keras")
needs("jax")

from trainguard.runner import Policy, Runner  # noqa: E402
from trainguard.store import Store  # noqa: E402

FIT = str(Path(__file__).with_name("pressure_keras.py")) + ":fit"
MiB = 2**20
PARAMS = {"epochs": 8, "leak_mib": 40, "epoch_s": 0.3}
XLA_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


@pytest.mark.slow
def test_a_keras_fit_checkpointed_under_pressure_ends_with_the_uninterrupted_weights(tmp_path):
    db = tmp_path / "k.db"
    # Keras on JAX: each of the three workers starts in about 6 CPU seconds (on torch about 11,
    # torch._dynamo's import), and XLA on the CPU, with the same flags in every worker, gives the
    # same weights in every worker; its cheapest code generation compiles the fit faster
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": XLA_FAST_COMPILE}
    common = {"store": db, "keras_backend": "jax", "threads": 1, "env": env}
    with Runner(**common) as runner:
        (plain,) = runner.map(FIT, [PARAMS], name="plain")
    assert plain.ok, plain.error
    # pressure about 4 epochs after the first one's RSS: one resume, in a second worker
    soft = plain.value["first_rss"] + 150 * MiB
    with Runner(policy=Policy(soft_limit=soft), **common) as runner:
        (pressed,) = runner.map(FIT, [PARAMS], name="pressed")
    assert pressed.ok, pressed.error
    assert pressed.value["resumed"] is True and pressed.value["start"] > 0
    assert pressed.value["weights"] == plain.value["weights"]
    with Store(db, readonly=True) as store:
        run = store.get_run("pressed").run_id
        statuses = [a.status for a in store.attempts(run)]
        actions = [e.data["action"] for e in store.events(run, kinds=["pressure"])]
    assert statuses.count("staged") >= 1 and statuses[-1] == "ok"
    assert actions[: statuses.count("staged")] == ["checkpointed"] * statuses.count("staged")


def test_checkpoint_action_outside_a_trial_is_one_line():
    import trainguard.keras
    from trainguard.exceptions import ConfigError

    callback = trainguard.keras.MemoryCallback(action="checkpoint")
    with pytest.raises(ConfigError, match="needs a trial context") as info:
        callback.on_train_begin()
    assert "\n" not in str(info.value)
