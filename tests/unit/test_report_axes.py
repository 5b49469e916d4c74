"""The run report's axes: memory fitted to the data (the limit drawn when near), idle gaps cut."""

from __future__ import annotations

from trainguard.report._axes import idle_gaps, memory_axis

MiB = 1 << 20


def test_a_far_limit_does_not_flatten_the_memory_axis() -> None:
    (lo, hi), show = memory_axis([49 * MiB, 69 * MiB], 1900 * MiB)
    assert not show
    assert 40 * MiB < lo < 49 * MiB and 69 * MiB < hi < 80 * MiB  # 49 -> 69 MiB fills the chart


def test_a_near_limit_is_drawn_and_the_axis_reaches_it() -> None:
    (lo, hi), show = memory_axis([400 * MiB, 500 * MiB], 600 * MiB)
    assert show and hi > 600 * MiB and lo < 400 * MiB


def test_idle_gaps_between_sessions_are_cut() -> None:
    # a session 0-100 s, resumed 10,000 s later for another 100 s
    cuts = idle_gaps([(0, 0), (5, 95), (100, 100), (10_100, 10_100), (10_105, 10_190), (10_200, 10_200)])
    assert cuts.gaps == ((100, 10_100),)
    assert cuts.at(50) == 50 and cuts.at(10_100) == 100 and cuts.at(10_200) == 200
    # a trial running through a stretch without readings is not a gap
    assert idle_gaps([(0, 0), (1, 500), (500, 500)]).gaps == ()
