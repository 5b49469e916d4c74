"""trainguard.transformers on a real Hugging Face Trainer (a tiny BERT built from a config, random
weights, nothing downloaded): MemoryCallback in the Trainer's logs, stopping a leaking fit before
its limit and committing the Trainer's checkpoint for a fresh worker; hyperparameter_search with
every trial in a guarded worker, equal to the Trainer's own search; Runner's OOM shrink driving
per_device_train_batch_size. The fits run in real trainguard workers or fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("transformers")
needs("torch")

from trainguard.runner import Policy, Runner, Shrink  # noqa: E402

HERE = Path(__file__).parent
MODELS = HERE / "hf_models.py"
MiB = 2**20


def test_stops_a_leaking_trainer_before_the_limit_and_stays_silent_on_a_flat_one():
    grid = [
        {"epochs": 12, "leak_mib": 0, "action": "warn", "margin_mib": 200},
        {"epochs": 40, "leak_mib": 20, "action": "stop", "margin_mib": 200},
    ]
    with Runner(store=None, threads=1) as runner:
        flat, leak = (r.value for r in runner.map(f"{MODELS}:fit_watched", grid))
    keys = ["memory_growth_bytes_per_epoch", "memory_peak_rss_bytes", "memory_rss_bytes"]
    assert flat["log_keys"] == keys and leak["log_keys"] == keys  # in trainer.state.log_history
    # flat: every epoch, nothing said
    assert flat["epochs_run"] == 12 and flat["events"] == [] and flat["warnings"] == []
    assert flat["stopped_epoch"] is None and max(flat["peak"]) < flat["limit"]
    # leaking, 20 MiB an epoch: stopped by the callback, no later than the first epoch over the limit
    assert leak["stopped_epoch"] is not None and leak["epochs_run"] == leak["stopped_epoch"] + 1 < 40
    assert leak["events"][0][1] in ("predicted", "limit"), leak["events"]
    crossed = [i for i, p in enumerate(leak["peak"]) if p >= leak["limit"]]
    assert not crossed or leak["epochs_run"] == crossed[0] + 1, (crossed, leak["epochs_run"])
    assert leak["growth"][-1] > 10 * MiB  # the estimate saw the leak
    assert leak["rss"][-1] - leak["rss"][0] > 100 * MiB  # it did grow: the stop was not premature


@pytest.mark.slow
def test_checkpoint_action_resumes_the_trainer_in_a_fresh_worker_with_the_uninterrupted_weights():
    # the limit 110 MiB over the worker's RSS before training: crossed after 2-4 epochs of 20 MiB
    # (the first epoch alone takes 45-65 MiB), so the Trainer's checkpoint is committed there and
    # (one stage per worker) a fresh worker resumes from it for the rest of the 6; the plain fit
    # runs the same 6 epochs without a limit
    grid = [{"epochs": 6, "leak_mib": 20, "headroom_mib": 110}, {"epochs": 6, "leak_mib": 20}]
    policy = Policy(max_stages_per_worker=1)
    with Runner(store=None, threads=1, policy=policy) as runner:
        pressed, plain = runner.map(f"{MODELS}:fit_checkpointed", grid)
    assert pressed.ok and plain.ok, (pressed.error, plain.error)
    assert pressed.attempts >= 2 and pressed.value["resumed"] and pressed.value["start"] > 0
    assert plain.attempts == 1 and not plain.value["resumed"]
    assert pressed.value["weights"] == plain.value["weights"]


def test_recorded_series_decide_as_the_keras_callback_does():
    """The decisions on a recorded series (the shared watch): a predicted crossing raises with the
    Keras callback's words; past the limit stops; a step reading is checked every N steps."""
    from transformers import TrainerControl, TrainerState

    import trainguard.transformers
    from trainguard.exceptions import MemoryLimitError

    def run(callback, epochs, readings):
        callback._rss = lambda: next(readings)
        state, control = TrainerState(), TrainerControl()
        callback.on_train_begin(None, state, control)
        for epoch in range(epochs):
            state.epoch = epoch + 1.0
            callback.on_epoch_end(None, state, control)
        return control

    raising = trainguard.transformers.MemoryCallback(limit="1GB", action="raise", count_tensors=False)
    readings = iter([500 * MiB, 600 * MiB, 700 * MiB, 800 * MiB, 900 * MiB])
    run(raising, 4, readings)  # 800 MiB + 100 MiB/epoch = 900 MiB: under 1 GB (953.7 MiB)
    assert raising.events == [] and raising.history[-1]["growth_bytes_per_epoch"] == 100 * MiB
    with pytest.raises(MemoryLimitError, match="predicted to cross the limit 953.7 MiB in 0.5 epochs"):
        raising.on_epoch_end(None, TrainerState(epoch=5.0), TrainerControl())
    stop = trainguard.transformers.MemoryCallback(
        limit="1GB", action="stop", predict=False, count_tensors=False
    )
    control = run(stop, 1, iter([980 * MiB] * 2))
    assert control.should_training_stop and stop.stopped_epoch == 0 and stop.events[0][1] == "limit"
    steps = trainguard.transformers.MemoryCallback(
        limit="1GB", action="stop", every_n_steps=2, count_tensors=False
    )
    steps._rss = lambda: 980 * MiB
    control = TrainerControl()
    steps.on_train_begin(None, TrainerState(), control)
    steps.on_step_end(None, TrainerState(global_step=1), control)
    assert steps.events == [] and not control.should_training_stop  # read every 2 steps only
    steps.on_step_end(None, TrainerState(global_step=2), control)
    assert control.should_training_stop and "(epoch 0, step 2)" in steps.events[0][2]


def test_bad_arguments_are_one_line_errors():
    import trainguard.transformers
    from trainguard.exceptions import ConfigError, UnitError

    with pytest.raises(UnitError, match="4 potatoes"):
        trainguard.transformers.MemoryCallback(limit="4 potatoes")
    with pytest.raises(ConfigError, match="action='halt' must be one of"):
        trainguard.transformers.MemoryCallback(action="halt")
    with pytest.raises(ConfigError, match="every_n_steps=0"):
        trainguard.transformers.MemoryCallback(every_n_steps=0)
    callback = trainguard.transformers.MemoryCallback(action="checkpoint")
    with pytest.raises(ConfigError, match="needs a trial context") as info:
        callback.restore()
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_search_of_6_trials_guarded_equals_the_trainers_own_and_keeps_the_caller_flat(tmp_path):
    def search(mode: str) -> dict:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "2"}
        child = [sys.executable, str(HERE / "hf_search_child.py"), mode, str(tmp_path / mode)]
        out = subprocess.run(child, capture_output=True, text=True, env=env, timeout=500)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])

    guarded, plain = search("guarded"), search("inprocess")
    # the same sampler seed and the same seeded training: the same trials, the same best one
    assert guarded["best"]["run_id"] == plain["best"]["run_id"]
    assert guarded["best"]["params"] == plain["best"]["params"]
    assert guarded["values"] == pytest.approx(plain["values"], rel=1e-5)
    # the guarded caller imported neither torch nor transformers; its own RSS after each of the
    # 6 trials stays within 12 MiB (measured: +3 MiB, Optuna's records), far below the
    # in-process search's, which holds the frameworks and the models
    assert guarded["loaded"] == [] and plain["loaded"] == ["torch", "transformers"]
    assert len(guarded["rss"]) == 6 and max(guarded["rss"]) - guarded["rss"][0] < 12 * MiB
    assert max(guarded["rss"]) < min(plain["rss"]) - 200 * MiB
    assert all(p and p > max(guarded["rss"]) for p in guarded["peaks"])  # each trial's worker peak


@pytest.mark.slow
def test_runner_oom_shrink_drives_per_device_train_batch_size():
    """A batch of 16384 needs about 2 GB over the worker's 0.5 GB: killed at the 1.2 GB limit, rerun
    in a fresh worker at a quarter of the batch with 4x the accumulation (4096 x 4)."""
    import trainguard.transformers

    policy = Policy(
        memory_limit="1200MB",
        on_oom=Shrink("per_device_train_batch_size", factor=0.25, accumulate="gradient_accumulation_steps"),
    )
    params = {
        "per_device_train_batch_size": 16384,
        "gradient_accumulation_steps": 1,
        "rows": 16384,
        "max_steps": 1,
    }
    trial = trainguard.transformers.TrainerTrial(f"{MODELS}:make_trainer", evaluate=False)
    with Runner(store=None, threads=2, policy=policy) as runner:
        (result,) = runner.map(trial, [params])
    assert result.ok, result.error
    assert result.attempts >= 2
    size = result.ran_with["per_device_train_batch_size"]
    assert size <= 4096 and size * result.ran_with["gradient_accumulation_steps"] == 16384
    assert result.value["objective"] == result.value["train_loss"] > 0


def test_missing_transformers_is_one_error_naming_the_install():
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "import trainguard.transformers as t\n"
        "for use in (lambda: t.MemoryCallback, lambda: t.hyperparameter_search(str, str, 1)):\n"
        "    try:\n"
        "        use()\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    assert all(
        line.startswith("MissingDependencyError") and "pip install -e '.[transformers]'" in line
        for line in lines
    )
