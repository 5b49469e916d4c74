"""The decision every MemoryCallback shares (Keras, Trainer, Lightning), on recorded figures: no
framework, no process."""

from __future__ import annotations

import logging
import warnings
from types import SimpleNamespace

import pytest

from trainguard.exceptions import ConfigError, MemoryLimitError
from trainguard.integrations._memory_readings import TensorCounter
from trainguard.integrations._memory_watch import MemoryWatch, batch_breach, epoch_breach

MiB = 2**20


def _watch(action: str = "stop", **kw) -> MemoryWatch:
    options = {"limit": "1GB", "gpu_limit": None, "predict": True, "horizon_epochs": 1, "min_epochs": 3}
    return MemoryWatch("owner.MemoryCallback", action=action, **{"confidence": 0.95, **options, **kw})


def test_epoch_breach_orders_limit_then_prediction_then_gpu():
    growing = SimpleNamespace(slope=100 * MiB, ci_low=90 * MiB, ci_high=110 * MiB)
    noisy = SimpleNamespace(slope=100 * MiB, ci_low=-5 * MiB, ci_high=205 * MiB)
    common = {"epoch": 4, "limit_bytes": 1000 * MiB, "gpu_limit_bytes": 10 * MiB, "horizon_epochs": 1}
    past = {"rss_bytes": 900 * MiB, "peak_rss_bytes": 1001 * MiB, "gpu_bytes": 20 * MiB}
    assert epoch_breach(past, growing, predict=True, **common).cause == "limit"
    near = {"rss_bytes": 950 * MiB, "peak_rss_bytes": 950 * MiB}
    breach = epoch_breach(near, growing, predict=True, **common)
    assert breach.cause == "predicted" and "in 0.5 epochs" in breach.message
    # not significant (the interval reaches below zero), or prediction off: no crossing predicted
    assert epoch_breach(near, noisy, predict=True, **common) is None
    assert epoch_breach(near, growing, predict=False, **common) is None
    gpu = {"rss_bytes": 100 * MiB, "peak_rss_bytes": 100 * MiB, "gpu_bytes": 20 * MiB}
    assert epoch_breach(gpu, None, predict=True, **common).cause == "gpu_limit"
    assert batch_breach(1001 * MiB, 1000 * MiB, 2, "step 40").message.endswith("(epoch 2, step 40)")
    assert batch_breach(999 * MiB, 1000 * MiB, 2, "step 40") is None
    assert batch_breach(10**12, None, 2, "step 40") is None


def _record(watch: MemoryWatch, series_mib: list[int]) -> list[str | None]:
    out = []
    for epoch, mib in enumerate(series_mib):
        reading = {"rss_bytes": mib * MiB, "peak_rss_bytes": mib * MiB}
        out.append(watch.decide(reading, watch.record(epoch, reading)))
    return out


def test_each_action_applied_as_the_keras_callback_does(caplog):
    stop = _watch("stop", predict=False)
    with caplog.at_level(logging.WARNING, logger="trainguard.integrations.memory_callback"):
        assert _record(stop, [990, 980, 970]) == ["stop", "stop", "stop"]
    assert stop.stopped_epoch == 0 and len(caplog.records) == 1  # logged once, returned each time
    assert [h["growth_bytes_per_epoch"] is None for h in stop.history] == [True, True, False]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _record(_watch("warn", predict=False), [990, 990]) == [None, None]
    assert len(caught) == 1  # once per cause
    assert _record(_watch("checkpoint", predict=False), [990]) == ["checkpoint"]
    raising = _watch("raise")
    with pytest.raises(MemoryLimitError, match="owner.MemoryCallback: RSS grows 100.0 MiB/epoch") as info:
        _record(raising, [500, 600, 700, 800, 900])
    assert info.value.limit_bytes == 10**9 and raising.events[0][1] == "predicted"
    raising.begin()
    assert raising.history == [] and raising.events == [] and raising.stopped_epoch is None


def test_log_values_carry_nan_before_an_estimate():
    watch = _watch("warn")
    reading = {"rss_bytes": 5 * MiB, "peak_rss_bytes": 6 * MiB}
    watch.record(0, reading)
    values = watch.log_values(reading, "memory_")
    assert values["memory_rss_bytes"] == 5 * MiB and "memory_epoch" not in values
    assert values["memory_growth_bytes_per_epoch"] != values["memory_growth_bytes_per_epoch"]  # NaN


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"action": "halt"}, "action='halt' must be one of"),
        ({"min_epochs": 2}, "min_epochs=2 must be >= 3"),
        ({"horizon_epochs": 0}, "horizon_epochs=0 must be a whole number >= 1"),
        ({"predict": "yes"}, "predict must be True or False"),
        ({"confidence": 1.5}, "confidence=1.5 must be between 0 and 1"),
    ],
)
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(ConfigError, match=message) as info:
        _watch(**options)
    assert "\n" not in str(info.value)


def test_census_budget_keeps_the_count_within_five_percent_of_training():
    calls = []

    def take() -> int:
        calls.append(1)
        return 42

    auto = TensorCounter("auto")
    assert auto.count(1.0, take) is None  # 0.5 s expected against 5 % of 1 s
    assert auto.count(20.0, take) == 42 and len(calls) == 1  # 5 % of 21 s covers it
    assert TensorCounter(False).count(100.0, take) is None
    with pytest.raises(ConfigError, match="count_tensors='sometimes'"):
        TensorCounter("sometimes")
