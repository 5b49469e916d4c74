"""The one watchdog loop (trainguard.process.watch): fixed rate, no burst, a failed tick skipped."""

from __future__ import annotations

import logging
import threading
import time

from trainguard.process.watch import Schedule, Watchdog


def test_a_schedule_that_fell_behind_starts_again_from_now_instead_of_bursting():
    schedule = Schedule(0.05, start_now=True)
    assert schedule.due()
    assert not schedule.due()  # the next tick is 50 ms away
    time.sleep(0.3)  # six intervals missed
    assert schedule.due()
    assert not schedule.due()  # one tick, not six to catch up
    assert 0.0 < schedule.delay() <= 0.05


def test_a_watchdog_outlives_a_failing_tick_and_stops_once(caplog):
    ticks: list[int] = []
    third = threading.Event()

    def tick() -> None:
        ticks.append(len(ticks))
        if len(ticks) == 1:
            raise RuntimeError("one bad reading")
        if len(ticks) >= 3:
            third.set()

    with caplog.at_level(logging.ERROR, logger="trainguard.process.watch"):
        watchdog = Watchdog(tick, 0.01, name="test-watchdog", what="the test tick").start()
        assert third.wait(5.0), ticks
        watchdog.stop()
        watchdog.stop()  # idempotent
    assert watchdog.stopped
    count = len(ticks)
    time.sleep(0.05)
    assert len(ticks) == count  # no tick after stop returned
    assert any("the test tick failed" in r.getMessage() for r in caplog.records)


def test_an_interval_read_at_each_tick_follows_its_source():
    intervals = [10.0]
    schedule = Schedule(lambda: intervals[0], start_now=True)
    assert schedule.due()
    assert schedule.delay() > 5.0
    intervals[0] = 0.0
    schedule = Schedule(lambda: intervals[0])
    assert schedule.due()
