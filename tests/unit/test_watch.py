"""The one watchdog loop (trainguard.process.watch): fixed rate, no burst, a failed tick skipped."""

from __future__ import annotations

import logging
import threading
import types

import pytest

from trainguard.process.watch import Schedule, Watchdog


def test_a_schedule_that_fell_behind_starts_again_from_now_instead_of_bursting(monkeypatch):
    from trainguard.process import watch

    clock = {"now": 1000.0}  # the schedule's clock, moved by the test: no sleep, no load
    monkeypatch.setattr(watch, "time", types.SimpleNamespace(monotonic=lambda: clock["now"]))
    schedule = Schedule(0.05, start_now=True)
    assert schedule.due()
    clock["now"] += 0.01
    assert not schedule.due()  # the next tick is 40 ms away
    clock["now"] += 0.3  # six intervals missed
    assert schedule.due()
    assert not schedule.due()  # one tick, not six to catch up
    assert schedule.delay() == pytest.approx(0.05)


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
    # no tick after stop returned: its thread has ended
    assert not [t for t in threading.enumerate() if t.name == "test-watchdog" and t.is_alive()]
    assert any("the test tick failed" in r.getMessage() for r in caplog.records)


def test_an_interval_read_at_each_tick_follows_its_source():
    intervals = [10.0]
    schedule = Schedule(lambda: intervals[0], start_now=True)
    assert schedule.due()
    assert schedule.delay() > 5.0
    intervals[0] = 0.0
    schedule = Schedule(lambda: intervals[0])
    assert schedule.due()
