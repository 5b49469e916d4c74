"""trainguard.keras.MemoryCallback on real Keras 3: TensorFlow and torch backends, each in a fresh
process (the backend is fixed per process). JAX is not installed on the test machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("keras")
needs("tensorflow")

CHILD = str(Path(__file__).parent / "keras_callback_child.py")
MiB = 2**20


def _run(backend: str, *cases: str) -> dict[str, dict]:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, CHILD, *cases], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert all(r["backend"] == backend for r in rows)
    return {r["case"]: r for r in rows}


@pytest.mark.slow
def test_stops_a_leaking_fit_before_the_limit_and_stays_silent_on_a_flat_one_tensorflow():
    # flat first: the leaking case keeps its memory until the process ends
    rows = _run("tensorflow", "flat:0:12:warn:200", "leak:20:60:stop:200")
    flat, leak = rows["flat"], rows["leak"]
    keys = [
        "memory_growth_bytes_per_epoch",
        "memory_live_tensors",
        "memory_peak_rss_bytes",
        "memory_rss_bytes",
    ]
    assert flat["history_keys"] == keys and leak["history_keys"] == keys  # in History
    # flat: all epochs, nothing said
    assert flat["epochs_run"] == 12 and flat["events"] == [] and flat["warnings"] == []
    assert flat["stopped_epoch"] is None and max(flat["peak"]) < flat["limit"]
    assert all(t > 0 for t in flat["tensors"])
    # leaking (about 20 MiB an epoch): stopped by a predicted crossing, before the limit
    assert leak["stopped_epoch"] is not None and leak["epochs_run"] < 60
    assert leak["epochs_run"] == leak["stopped_epoch"] + 1
    assert leak["events"][0][1] == "predicted", leak["events"]
    assert max(leak["peak"]) < leak["limit"], (max(leak["peak"]) - leak["limit"]) / MiB
    assert leak["growth"][-1] > 10 * MiB  # the estimate saw the leak
    assert leak["rss"][-1] - leak["rss"][0] > 100 * MiB  # it did grow: the stop was not premature


@pytest.mark.slow
def test_torch_backend_records_and_stops_too():
    pytest.importorskip("torch")
    rows = _run("torch", "leak:20:40:stop:160")
    leak = rows["leak"]
    assert leak["stopped_epoch"] is not None and leak["epochs_run"] < 40
    # On the torch backend RSS moves by tens of MiB from one epoch to the next (a CI run read
    # +21, +21, +85, +21 MiB on a 20 MiB-an-epoch leak), so a jump can carry the peak past the
    # limit before any prediction could see it. What the callback owes is to act no later than
    # the epoch that crossed: the training ends at the first epoch at or over the limit.
    crossed = [i for i, p in enumerate(leak["peak"]) if p >= leak["limit"]]
    assert not crossed or leak["epochs_run"] == crossed[0] + 1, (crossed, leak["epochs_run"])
    assert leak["events"][0][1] in ("predicted", "limit"), leak["events"]
    assert all(t > 0 for t in leak["tensors"])  # torch tensors counted


def test_bad_arguments_are_one_line_errors():
    import trainguard.keras
    from trainguard.exceptions import ConfigError, UnitError

    with pytest.raises(UnitError) as err:
        trainguard.keras.MemoryCallback(limit="4 potatoes")
    assert "4 potatoes" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="action='halt' must be one of"):
        trainguard.keras.MemoryCallback(limit="4GB", action="halt")
    with pytest.raises(ConfigError, match="every_n_batches=0"):
        trainguard.keras.MemoryCallback(every_n_batches=0)


def test_raise_action_and_logs_in_process():
    """The decisions on a recorded series: past the limit raises MemoryLimitError; below it and flat, nothing."""
    import trainguard.keras
    from trainguard.exceptions import MemoryLimitError

    callback = trainguard.keras.MemoryCallback(limit="1GB", action="raise", count_tensors=False)
    readings = iter([500 * MiB, 600 * MiB, 700 * MiB, 800 * MiB, 900 * MiB, 990 * MiB])
    callback._rss = lambda: next(readings)  # a recorded series instead of this process's RSS
    callback.on_train_begin()
    logs: dict = {}
    for epoch in range(3):
        callback.on_epoch_end(epoch, logs)
    assert logs["memory_rss_bytes"] == 700 * MiB and logs["memory_growth_bytes_per_epoch"] == 100 * MiB
    callback.on_epoch_end(3, logs)  # 800 MiB + 100 MiB/epoch = 900 MiB: under 1 GB (953.7 MiB)
    assert callback.events == []
    with pytest.raises(MemoryLimitError, match="predicted to cross the limit 953.7 MiB in 0.5 epochs"):
        callback.on_epoch_end(4, logs)  # 900 MiB + 100 MiB/epoch crosses it
    stop = trainguard.keras.MemoryCallback(limit="1GB", action="stop", predict=False, count_tensors=False)
    stop._rss = lambda: 980 * MiB
    stop.on_train_begin()
    stop.on_epoch_end(0, {})
    assert stop.stopped_epoch == 0 and stop.events[0][1] == "limit"
    batches = trainguard.keras.MemoryCallback(
        limit="1GB", action="stop", every_n_batches=2, count_tensors=False
    )
    batches._rss = lambda: 980 * MiB
    batches.on_train_begin()
    batches.on_epoch_begin(0)
    batches.on_train_batch_end(0, {})
    assert batches.events == []  # read every 2 batches only
    batches.on_train_batch_end(1, {})
    assert batches.stopped_epoch == 0 and "(epoch 0, batch 1)" in batches.events[0][2]


def test_growth_lines_up_with_epochs_and_the_stop_message_tells_size_and_limit_apart():
    """Keras' History lists a key only from the first epoch that logs it: the growth estimate,
    made from the third epoch on, read as epoch 0's. And a predicted crossing printed the size and
    the limit rounded to the same figure ("at 1.9 GiB ... cross the limit 1.9 GiB")."""
    import trainguard.keras

    GiB = 2**30
    callback = trainguard.keras.MemoryCallback(limit=int(1.94 * GiB), action="stop", count_tensors=False)
    readings = iter([1.80 * GiB, 1.85 * GiB, 1.90 * GiB, 1.92 * GiB])
    callback._rss = lambda: int(next(readings))
    callback.on_train_begin()
    logged = []
    for epoch in range(3):
        logs: dict = {}
        callback.on_epoch_end(epoch, logs)
        logged.append(logs["memory_growth_bytes_per_epoch"])
    assert [h["epoch"] for h in callback.history] == [0, 1, 2]
    assert [h["growth_bytes_per_epoch"] is None for h in callback.history] == [True, True, False]
    assert logged[0] != logged[0] and logged[1] != logged[1] and logged[2] > 0  # NaN, NaN, the estimate
    assert callback.events and callback.events[0][1] == "predicted"
    message = callback.events[0][2]
    assert "at 1.90 GiB after epoch 2" in message and "cross the limit 1.94 GiB" in message, message
