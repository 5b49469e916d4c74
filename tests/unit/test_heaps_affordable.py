"""When the leak check reads glibc's heaps: within 1 % of the step time between readings, decided
on the recent cost, so that one slow reading does not switch the split off for the run."""

from trainguard.leaks._native import HEAP_SHARE, heaps_affordable


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
