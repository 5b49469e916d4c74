"""trainguard.lightning.MemoryCallback on a real Lightning Trainer (a tiny LightningModule on the
CPU), in real trainguard workers: the memory figures in the logged metrics, a leaking fit stopped
before its limit, a flat one left alone, and a checkpoint that a fresh worker resumes from to the
uninterrupted fit's weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("lightning")
needs("torch")

from trainguard.runner import Policy, Runner  # noqa: E402

MODELS = Path(__file__).with_name("lightning_models.py")
MiB = 2**20


def test_stops_a_leaking_fit_before_the_limit_and_stays_silent_on_a_flat_one():
    grid = [
        {"epochs": 12, "leak_mib": 0, "action": "warn", "margin_mib": 200},
        {"epochs": 40, "leak_mib": 20, "action": "stop", "margin_mib": 200},
    ]
    with Runner(store=None, threads=1) as runner:
        flat, leak = (r.value for r in runner.map(f"{MODELS}:fit_watched", grid))
    keys = [
        "memory_growth_bytes_per_epoch",
        "memory_live_tensors",
        "memory_peak_rss_bytes",
        "memory_rss_bytes",
    ]
    assert flat["metrics"] == keys and leak["metrics"] == keys  # logged: trainer.callback_metrics
    # logged as float32: within 256 bytes of the reading near 1 GiB
    assert abs(leak["logged_rss"] - leak["rss"][-1]) <= 256
    assert flat["epochs_run"] == 12 and flat["events"] == [] and flat["warnings"] == []
    assert flat["stopped_epoch"] is None and max(flat["peak"]) < flat["limit"]
    assert all(t > 0 for t in flat["tensors"])  # torch tensors counted
    # leaking, 20 MiB an epoch: stopped by the callback, no later than the first epoch over the limit
    assert leak["stopped_epoch"] is not None and leak["epochs_run"] == leak["stopped_epoch"] + 1 < 40
    assert leak["events"][0][1] in ("predicted", "limit"), leak["events"]
    crossed = [i for i, p in enumerate(leak["peak"]) if p >= leak["limit"]]
    assert not crossed or leak["epochs_run"] == crossed[0] + 1, (crossed, leak["epochs_run"])
    assert leak["growth"][-1] > 10 * MiB
    assert leak["rss"][-1] - leak["rss"][0] > 100 * MiB  # it did grow: the stop was not premature


@pytest.mark.slow
def test_checkpoint_action_resumes_in_a_fresh_worker_with_the_uninterrupted_weights():
    # the limit 60 MiB over the worker's RSS before the fit, crossed after a few 20 MiB epochs;
    # the checkpoint (with the generators' states, which Lightning's leaves out: the resumed
    # epochs would shuffle differently) ends the worker and a fresh one resumes from it
    grid = [{"epochs": 4, "leak_mib": 20, "headroom_mib": 60}, {"epochs": 4, "leak_mib": 20}]
    with Runner(store=None, threads=1, policy=Policy(max_stages_per_worker=1)) as runner:
        pressed, plain = runner.map(f"{MODELS}:fit_checkpointed", grid)
    assert pressed.ok and plain.ok, (pressed.error, plain.error)
    assert pressed.attempts >= 2 and pressed.value["resumed"] and pressed.value["start"] > 0
    assert plain.attempts == 1 and not plain.value["resumed"]
    assert pressed.value["weights"] == plain.value["weights"]


def test_bad_arguments_and_no_trial_context_are_one_line_errors():
    import trainguard.lightning
    from trainguard.exceptions import ConfigError, UnitError

    with pytest.raises(UnitError, match="4 potatoes"):
        trainguard.lightning.MemoryCallback(limit="4 potatoes")
    with pytest.raises(ConfigError, match="action='halt' must be one of"):
        trainguard.lightning.MemoryCallback(action="halt")
    with pytest.raises(ConfigError, match="every_n_batches=0"):
        trainguard.lightning.MemoryCallback(every_n_batches=0)
    with pytest.raises(ConfigError, match="needs a trial context") as info:
        trainguard.lightning.MemoryCallback(action="checkpoint").restore()
    assert "\n" not in str(info.value)


def test_missing_lightning_is_one_error_naming_the_install():
    code = (
        "import sys; sys.modules['lightning'] = None\n"
        "import trainguard.lightning\n"
        "try:\n"
        "    trainguard.lightning.MemoryCallback\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("MissingDependencyError"), out.stdout + out.stderr
    assert "pip install -e '.[lightning]'" in out.stdout
