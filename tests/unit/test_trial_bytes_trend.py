"""The rise of a worker's bytes in use trial over trial (pure), and the lines `show` prints of it."""

from __future__ import annotations

import math

import pytest

from trainguard.cli._bytes_in_use import by_trial, bytes_in_use_json, trend_lines
from trainguard.exceptions import ConfigError
from trainguard.leaks.stats import trial_bytes_trend
from trainguard.runner.worker import process
from trainguard.store import BytesInUseReading

MIB = 2**20


def test_a_steady_rise_is_a_rise_and_a_flat_series_is_flat():
    rising = trial_bytes_trend([40 * MIB + i * 4 * MIB + (i % 2) * 300 for i in range(6)])
    assert rising.status == "rises" and rising.per_trial_bytes == pytest.approx(4 * MIB, rel=1e-3)
    assert (rising.first_bytes, rising.n) == (40 * MIB, 6)
    assert trial_bytes_trend([40 * MIB] * 6).status == "flat"
    # a first trial that loads things, then flat within a few KiB: flat
    warm = trial_bytes_trend([30 * MIB] + [41 * MIB + (i % 3) * 2048 for i in range(7)])
    assert warm.status == "flat" and warm.settled_from >= 1
    assert trial_bytes_trend([30 * MIB, 50 * MIB] + [61 * MIB] * 6).status == "flat"
    # a first trial that is off, then 4 MiB a trial: still a rise
    assert trial_bytes_trend([50 * MIB] + [40 * MIB + i * 4 * MIB for i in range(1, 6)]).status == "rises"


def test_a_small_steady_rise_is_slight_a_noisy_one_unclear_and_two_readings_too_few():
    assert trial_bytes_trend([40 * MIB + i * 16 * 1024 for i in range(8)]).status == "slight"
    assert trial_bytes_trend([40 * MIB, 60 * MIB, 39 * MIB, 61 * MIB, 40 * MIB, 59 * MIB]).status == "unclear"
    few = trial_bytes_trend([40 * MIB, 44 * MIB])
    assert few.status == "too_few" and few.per_trial_bytes == 4 * MIB and math.isinf(few.ci_low)


@pytest.mark.parametrize(
    ("values", "kwargs", "words"),
    [
        ([], {}, "at least one trial"),
        ([1, -5, 3], {}, ">= 0"),
        ([1.0, float("nan"), 3.0], {}, ">= 0"),
        ([1, 2, 3], {"min_rise_bytes": 0}, "min_rise_bytes=0 must be > 0"),
    ],
)
def test_bad_input_says_what_was_wrong(values, kwargs, words):
    with pytest.raises(ConfigError, match=words):
        trial_bytes_trend(values, **kwargs)


def _reading(index, worker_id, value, attempt=1):
    return BytesInUseReading(1, index, attempt, worker_id, "glibc", value, float(index))


def test_show_says_per_worker_whether_bytes_in_use_rose():
    readings = [_reading(i, 0, 40 * MIB + i * 4 * MIB) for i in range(6)]
    readings += [_reading(6 + i, 1, 40 * MIB) for i in range(4)]
    lines = trend_lines(readings)
    assert lines[0] == (
        "worker 0: bytes in use after each trial (glibc): 40.0 MiB → 60.0 MiB over 6 trials, "
        "+4.0 MiB/trial (the worker's native memory grows)"
    )
    assert lines[1].startswith("worker 1: bytes in use after each trial (glibc): 40.0 MiB → 40.0 MiB over 4")
    assert lines[1].endswith("+0 B/trial (flat)")
    warm = trend_lines([_reading(0, 0, 20 * MIB)] + [_reading(i, 0, 40 * MIB) for i in range(1, 8)])
    assert "→ 40.0 MiB over 8 trials, +0 B/trial after the first" in warm[0] and warm[0].endswith("(flat)")
    one_worker = trend_lines(readings[:6])
    assert one_worker[0].startswith("bytes in use after each trial (glibc): 40.0 MiB")
    data = bytes_in_use_json(readings)
    assert [w["trend"]["status"] for w in data["workers"]] == ["rises", "flat"]
    assert len(data["readings"]) == 10 and data["readings"][0]["bytes_in_use"] == 40 * MIB


def test_no_readings_no_lines_and_a_retried_trial_shows_its_last_attempt():
    assert trend_lines([]) == [] and bytes_in_use_json([]) == {"readings": [], "workers": []}
    assert by_trial([_reading(0, 0, 5), _reading(0, 1, 9, attempt=2)]) == {0: 9}


def test_the_worker_reads_nothing_where_the_allocator_has_no_count(monkeypatch):
    class Unavailable:
        available = False
        name = "system"

        def read(self):
            raise AssertionError("an unavailable allocator is never read")

    monkeypatch.setattr(process, "_ALLOCATOR", [Unavailable()])
    collected = []
    monkeypatch.setattr(process.gc, "collect", lambda: collected.append(1))
    stats: dict = {}
    process._read_bytes_in_use(stats, collect=True)
    assert stats == {} and collected == []
