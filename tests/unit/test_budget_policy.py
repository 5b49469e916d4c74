"""The memory budget's and the thread choice's decisions, on recorded numbers (no process)."""

from __future__ import annotations

import pytest

from trainguard.runner.policy import (
    BUDGET_HEADROOM,
    Policy,
    WorkerHistory,
    budget_workers,
    choose_budget_kill,
    choose_threads,
    decide_budget,
    next_peak_estimate,
    recycle_expected_soon,
    should_prestart,
)
from trainguard.runner.session._pool import THREAD_SAMPLES, PoolPlanner, ThreadChoice

MIB = 2**20
PEAK = 673 * MIB  # the Keras workload's single-trial peak


def test_one_worker_until_a_peak_is_measured():
    d = budget_workers(4096 * MIB, 8, None)
    assert d.values["workers"] == 1
    assert "until a trial's peak is measured" in d.message


@pytest.mark.parametrize(
    ("budget_ratio", "max_workers", "expected"),
    [(1.6, 2, 1), (3.0, 2, 2), (3.0, 8, 2), (10.0, 4, 4), (1.0, 2, 1), (0.5, 2, 1)],
)
def test_workers_are_as_many_fresh_trials_as_fit_with_room(budget_ratio, max_workers, expected):
    d = budget_workers(int(budget_ratio * PEAK), max_workers, PEAK)
    assert d.values["workers"] == expected
    assert d.values["fit"] == pytest.approx(budget_ratio / BUDGET_HEADROOM, rel=1e-3)
    assert "measured peak" in d.message


def test_capped_message_names_the_cap():
    d = budget_workers(100 * PEAK, 2, PEAK)
    assert "capped at 2" in d.message


def _decide(predicted, others, fresh=PEAK, busy=True, budget=int(1.6 * PEAK)):
    return decide_budget(
        budget,
        predicted_peak_bytes=predicted,
        others_reserved_bytes=others,
        fresh_peak_bytes=fresh,
        others_busy=busy,
    )


def test_a_trial_that_fits_runs():
    assert _decide(PEAK * 1.1, 0).action == "run"
    # nothing measured yet: the first trial runs, whatever the budget
    assert _decide(None, 0, fresh=None).action == "run"


def test_a_grown_worker_is_recycled_when_a_fresh_one_fits():
    budget = int(3 * PEAK)
    d = _decide(PEAK * 1.6, PEAK * 1.5, budget=budget)
    assert d.action == "recycle"
    assert "would take the run over its budget" in d.message


def test_waits_while_another_worker_runs_and_retires_when_none_does():
    budget = int(2.2 * PEAK)
    # fresh does not fit beside the other either: wait for it while it runs
    assert _decide(PEAK * 1.3, PEAK * 1.3, budget=budget, busy=True).action == "wait"
    assert _decide(PEAK * 1.3, PEAK * 1.3, budget=budget, busy=False).action == "retire"


def test_budget_below_one_trial_stops_with_the_peak():
    d = _decide(PEAK, 0, budget=int(0.5 * PEAK))
    assert d.action == "over_budget"
    assert "below one trial's measured peak 673.0 MiB" in d.message
    # a grown worker alone over the budget is recycled, not stopped, when a fresh one fits
    assert _decide(PEAK * 1.7, 0, busy=False).action == "recycle"


def test_prestart_only_with_room_and_a_recycle_coming():
    budget = int(3 * PEAK)
    room = should_prestart(budget, reserved_bytes=2 * PEAK, spare_bytes=0.5 * PEAK, recycle_expected=True)
    assert room is not None and room.action == "prestart"
    no_room = should_prestart(
        budget, reserved_bytes=2.6 * PEAK, spare_bytes=0.5 * PEAK, recycle_expected=True
    )
    assert no_room is not None and no_room.action == "no_room" and "would not fit" in no_room.message
    assert (
        should_prestart(budget, reserved_bytes=PEAK, spare_bytes=0.5 * PEAK, recycle_expected=False) is None
    )
    assert should_prestart(budget, reserved_bytes=PEAK, spare_bytes=None, recycle_expected=True) is None


def _growing(n, step=10 * MIB, base=600 * MIB, excess=70 * MIB):
    rss = tuple(base + i * step for i in range(n))
    return WorkerHistory(n, rss, tuple(r + excess for r in rss))


def test_recycle_expected_soon_looks_ahead_of_the_default_rule():
    policy = Policy()  # recycle before 1.2 x the first trial's peak (670 MiB -> 804 MiB)
    assert not recycle_expected_soon(policy, _growing(3))
    # at 9 trials the next peaks are ~760 and ~770 MiB; two ahead of 12 crosses 804 MiB
    assert recycle_expected_soon(policy, _growing(12))
    flat = WorkerHistory(10, (600 * MIB,) * 10, (670 * MIB,) * 10)
    assert not recycle_expected_soon(policy, flat)


def test_next_peak_estimate_uses_observed_peaks_before_the_slope():
    policy = Policy(min_trials_for_slope=3)
    one = WorkerHistory(1, (600 * MIB,), (700 * MIB,))
    assert next_peak_estimate(policy, one) == 700 * MIB
    assert next_peak_estimate(policy, _growing(6)) == pytest.approx((600 + 60) * MIB + 70 * MIB, rel=1e-6)
    assert next_peak_estimate(policy, WorkerHistory(0)) is None


def test_choose_threads_waits_for_every_candidate_then_takes_the_faster_median():
    assert choose_threads(2, {1: [2.0, 2.1, 2.2], 2: [1.0, 1.0]}) is None
    d = choose_threads(2, {1: [2.0, 2.1, 9.0], 2: [2.5, 2.6, 2.4]})
    assert d.values["threads"] == 1  # one slow outlier does not decide
    assert "by measurement" in d.message and "1 thread: 2.10 s" in d.message


def test_thread_choice_measures_each_candidate_in_turn():
    choice = ThreadChoice(cores=2)
    assert choice.candidates(2) == (1, 2)
    assert choice.candidates(1) == (2,)
    assert choice.for_new_worker(2) == 1
    for _ in range(THREAD_SAMPLES):
        assert choice.observe(2, 1, 3.0) is None
    assert choice.for_new_worker(2) == 2  # the next worker measures the other candidate
    assert choice.for_new_worker(2, live_threads=[1, 2]) == 1  # one at a time
    decisions = [choice.observe(2, 2, 4.0) for _ in range(THREAD_SAMPLES)]
    assert decisions[-1] is not None and decisions[-1].values["threads"] == 1
    assert choice.for_new_worker(2) == 1
    assert choice.observe(2, 1, 1.0) is None  # chosen once for good


def test_explicit_threads_are_never_explored():
    choice = ThreadChoice(cores=8, explicit=3)
    assert choice.for_new_worker(2) == 3
    assert choice.observe(2, 3, 1.0) is None


def test_planner_records_the_first_measurement_and_later_changes_only():
    planner = PoolPlanner(max_workers=2, budget_bytes=int(3 * PEAK), cores=2, threads=None)
    assert planner.initial().values["workers"] == 1
    first = planner.first_trial_done(PEAK, 600 * MIB)
    assert first is not None and first.values["workers"] == 2 and first.values["previous"] == 1
    assert planner.first_trial_done(PEAK, 600 * MIB) is None  # same again: nothing to record
    bigger = planner.first_trial_done(int(1.5 * PEAK), 600 * MIB)
    assert bigger is not None and bigger.values["workers"] == 1
    assert planner.spare_bytes == 600 * MIB


def test_planner_without_budget_keeps_the_fixed_count():
    planner = PoolPlanner(max_workers=3, budget_bytes=None, cores=2, threads=None)
    assert planner.initial() is None
    assert planner.first_trial_done(PEAK, PEAK) is None
    assert planner.target == 3


def test_an_unmeasured_alternative_is_said_at_the_end():
    choice = ThreadChoice(cores=2)
    choice.observe(2, 1, 1.0)
    (line,) = choice.unresolved([(2, 1), (2, 1)])
    assert "not compared with 2" in line and "1 thread: 1" in line
    assert ThreadChoice(cores=2).unresolved([(1, 2)]) == []  # one worker: nothing to choose


def test_no_kill_within_the_budget():
    assert choose_budget_kill(1000 * MIB, [(0, 500 * MIB, 3.0), (1, 500 * MIB, 1.0)]) is None
    assert choose_budget_kill(1000 * MIB, []) is None


def test_over_the_budget_the_trial_started_last_is_killed():
    k = choose_budget_kill(1000 * MIB, [(0, 560 * MIB, 3.0), (1, 480 * MIB, 0.5)])
    assert k is not None and k.worker_id == 1 and not k.alone
    assert k.values["excess_bytes"] == 40 * MIB and k.values["sum_bytes"] == 1040 * MIB
    assert "the workers' trees summed 1.0 GiB > 1000.0 MiB" in k.message, k.message
    assert "its trial started last (0.5 s ago)" in k.message


def test_a_worker_running_no_trial_is_killed_first():
    # a replacement started early (or an idle worker) costs no trial when it ends
    k = choose_budget_kill(1000 * MIB, [(0, 500 * MIB, 3.0), (1, 420 * MIB, 0.5), (2, 100 * MIB, None)])
    assert k is not None and k.worker_id == 2 and "it ran no trial" in k.message


def test_only_a_tree_that_covers_the_excess_is_chosen_by_cost():
    # the spare's 30 MiB does not cover 140 MiB over: the later of the trials that do is ended
    k = choose_budget_kill(1000 * MIB, [(0, 600 * MIB, 3.0), (1, 510 * MIB, 0.4), (2, 30 * MIB, None)])
    assert k is not None and k.worker_id == 1
    # none covers it alone: the largest tree
    k = choose_budget_kill(100 * MIB, [(0, 90 * MIB, 3.0), (1, 80 * MIB, 0.4), (2, 70 * MIB, None)])
    assert k is not None and k.worker_id == 0 and "largest" in k.message


def test_a_tree_over_the_budget_by_itself_is_alone():
    k = choose_budget_kill(500 * MIB, [(0, 620 * MIB, 2.0)])
    assert k is not None and k.worker_id == 0 and k.alone and k.values["tree_bytes"] == 620 * MIB
    k = choose_budget_kill(500 * MIB, [(0, 620 * MIB, None)])  # no trial: nothing to stop the run for
    assert k is not None and not k.alone


def test_planner_lowered_after_a_kill_stays_lowered():
    p = PoolPlanner(max_workers=4, budget_bytes=int(6 * PEAK), cores=4, threads=None)
    p.initial()
    assert p.first_trial_done(PEAK, PEAK).values["workers"] == 4
    change = p.lower_after_kill(2, "worker 3 was killed at the memory budget")
    assert change is not None and change.values["workers"] == 2 and change.values["previous"] == 4
    assert "2 workers from now on, 4 before: worker 3 was killed" in change.message
    assert p.target == 2 and p.cap == 2
    p.first_trial_done(PEAK, PEAK)  # a later fresh worker's measurement does not raise it again
    assert p.target == 2
    assert p.lower_after_kill(0, "again").values["workers"] == 1  # never under 1
    assert p.lower_after_kill(3, "more live than the target") is None and p.target == 1
