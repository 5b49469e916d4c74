"""The run's ETA counts down between finishes instead of equalling (and growing with) the elapsed time."""

from __future__ import annotations

from trainguard.runner.session._eta import eta_seconds


def test_eta_counts_down_between_finishes() -> None:
    # 2 of 4 trials done, the second at t=20 s: 10 s a trial, 20 s left at t=20
    at_finish = eta_seconds(started=0.0, last_done=20.0, done=2, remaining=2, now=20.0)
    later = eta_seconds(started=0.0, last_done=20.0, done=2, remaining=2, now=25.0)
    assert at_finish == 20.0
    assert later == 15.0  # the old elapsed/done*remaining said 25 s here: the elapsed time, rising


def test_eta_unknown_before_a_finish_or_when_overdue_and_zero_when_done() -> None:
    assert eta_seconds(started=0.0, last_done=None, done=0, remaining=4, now=9.0) is None
    assert eta_seconds(started=0.0, last_done=10.0, done=1, remaining=1, now=30.0) is None
    assert eta_seconds(started=0.0, last_done=10.0, done=4, remaining=0, now=30.0) == 0.0


def test_earlier_sessions_do_not_set_the_pace() -> None:
    # a resumed run: 8 trials came from earlier sessions, 1 this session in 5 s, 3 remain
    assert eta_seconds(started=100.0, last_done=105.0, done=1, remaining=3, now=105.0) == 15.0
