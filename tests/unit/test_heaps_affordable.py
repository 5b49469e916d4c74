"""When the leak check reads glibc's heaps: within 1 % of the step time since they were last read,
decided on the recent cost, so that slow readings make the split sparser, never switch it off."""

import pytest

from trainguard.leaks import _native
from trainguard.leaks._native import HEAP_SHARE, AllocatorSeries, heaps_affordable


def test_the_first_two_readings_always_read_the_heaps() -> None:
    assert heaps_affordable([], None)
    assert heaps_affordable([], 0.0001)
    assert heaps_affordable([0.050], 0.0)  # the reading right after the baseline: no step yet


def test_an_unknown_step_time_reads_them() -> None:
    assert heaps_affordable([0.002, 0.002, 0.002], None)


def test_one_slow_reading_does_not_switch_the_split_off() -> None:
    step = 0.4  # 4 ms of heaps a reading is affordable
    assert heaps_affordable([0.0017, 0.0058], step)  # measured beside a 0.4 s step on busy cores
    assert heaps_affordable([0.006, 0.002, 0.009, 0.002, 0.012], step)


def test_readings_that_cost_more_than_the_share_stop() -> None:
    step = 0.1  # 1 ms affordable
    assert not heaps_affordable([0.004, 0.003, 0.003], step)
    assert not heaps_affordable([0.0005, 0.003, 0.003, 0.003, 0.003, 0.003], step)  # the last five
    assert heaps_affordable([0.0008] * 3, step)
    assert HEAP_SHARE == 0.01


class _Heaps:
    """glibc's heaps as ``probes.heaps.HeapResidency`` shows them, read in no time."""

    available = True

    def read(self) -> int:
        return 1 << 20


class _Clock:
    """``time`` as ``_native`` reads it: each reading of the heaps costs 10 us, whatever the
    machine's load (on a CI run's busy cores the real clock once gave that reading over 1 ms)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 5e-6
        return self.now


@pytest.fixture(autouse=True)
def _steady_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "time", _Clock())


def test_slow_readings_make_the_split_sparser_and_never_switch_it_off() -> None:
    # five readings of 4 ms in a row beside a 0.1 s step between readings (1 ms affordable): with the
    # step time of one reading alone the split stopped for the rest of the run (8 of 35 readings)
    series = AllocatorSeries(enabled=False)
    series.heaps = _Heaps()
    series.heap_costs_s = [0.004] * 5
    split = [series.read_heaps(0.1) is not None for _ in range(4)]
    assert split == [False, False, False, True]  # 0.4 s of steps since the heaps were read: 4 ms
    # that reading cost next to nothing, so the next one reads them again
    assert series.read_heaps(0.1) is not None
    assert len(series.heap_costs_s) == 7


def test_an_unknown_step_time_still_reads_them_and_restarts_the_count() -> None:
    series = AllocatorSeries(enabled=False)
    series.heaps = _Heaps()
    series.heap_costs_s = [0.004] * 5
    assert series.read_heaps(None) is not None
    series.heap_costs_s = [0.004] * 5  # the count starts again from that reading
    assert [series.read_heaps(0.2) is not None for _ in range(2)] == [False, True]
