"""The runner's decisions as pure functions over recorded series: no process, no framework."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError, UnitError
from trainguard.runner.policy import (
    KillDecision,
    Policy,
    WorkerHistory,
    check_limits,
    classify_end,
    decide_recycle,
    first_recycle,
    growth_per_trial,
    predict_next_peak,
    should_retry,
)

MiB = 2**20

# Recorded in this repo (trainguard.workloads.keras_fit defaults, TF backend, one worker): the
# worker's RSS after each of 12 trials and each trial's peak, in MiB. First trial includes the
# TensorFlow import. It grows ~10 MiB per trial.
KERAS_TF_RSS = [578, 589, 600, 610, 619, 629, 639, 649, 659, 668, 678, 688]
KERAS_TF_PEAK = [578, 589, 600, 610, 620, 629, 639, 649, 659, 669, 678, 688]

# A flat worker whose RSS swings by tens of MiB around 600 MiB (like Keras on the torch backend).
FLAT_NOISY = [
    600,
    652,
    590,
    641,
    575,
    660,
    598,
    630,
    581,
    655,
    600,
    640,
    588,
    650,
    596,
    645,
    577,
    661,
    603,
    634,
]


def _mib(values):
    return [v * MiB for v in values]


# -- Policy validation ------------------------------------------------------------------------------


def test_policy_parses_sizes_and_durations():
    p = Policy(
        memory_limit="6GB", recycle_above="1GiB", recycle_growth="200MB", gpu_memory_limit=1000, timeout="5m"
    )
    assert p.memory_limit == 6 * 1000**3
    assert p.recycle_above == 2**30
    assert p.recycle_growth == 200 * 1000**2
    assert p.gpu_memory_limit == 1000
    assert p.timeout == 300.0
    assert p.to_dict()["retry_on"] == ["crash", "memory", "timeout"]


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"memory_limit": "4 potatoes"}, "memory_limit"),
        ({"timeout": "soon"}, "timeout"),
        ({"max_trials_per_worker": 0}, "max_trials_per_worker"),
        ({"retries": -1}, "retries"),
        ({"retry_on": ("crash", "gremlins")}, "gremlins"),
        ({"on_error": "explode"}, "on_error"),
        ({"peak_ratio": 0.9}, "peak_ratio"),
        ({"memory_limit": 0}, "memory_limit"),
        ({"predictive": "yes"}, "predictive"),
    ],
)
def test_policy_rejects_bad_values_with_one_line(kwargs, needle):
    with pytest.raises(ConfigError) as info:
        Policy(**kwargs)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_size_error_is_a_unit_error():
    with pytest.raises(UnitError, match="4 potatoes"):
        Policy(memory_limit="4 potatoes")


# -- growth and prediction --------------------------------------------------------------------------


def test_growth_per_trial_matches_the_leak_statistics_module():
    stats = pytest.importorskip("trainguard.leaks.stats")
    for series in (KERAS_TF_RSS, FLAT_NOISY, [5, 1, 9, 2, 8]):
        assert growth_per_trial(_mib(series)) == pytest.approx(stats.theil_sen(_mib(series)))


def test_growth_ignores_one_spike():
    series = [100, 110, 120, 400, 140, 150, 160]
    assert growth_per_trial(_mib(series)) == pytest.approx(10 * MiB, rel=0.05)
    assert growth_per_trial([1]) is None


def test_prediction_one_trial_ahead_on_the_keras_series():
    history = WorkerHistory(6, tuple(_mib(KERAS_TF_RSS[:6])), tuple(_mib(KERAS_TF_PEAK[:6])))
    predicted = predict_next_peak(history)
    assert predicted == pytest.approx(KERAS_TF_PEAK[6] * MiB, abs=4 * MiB)


# -- recycling rules -------------------------------------------------------------------------------


def test_default_budget_recycles_the_leaking_keras_worker_before_1_2x():
    hit = first_recycle(Policy(), _mib(KERAS_TF_RSS), _mib(KERAS_TF_PEAK))
    assert hit is not None
    n, decision = hit
    assert decision.rule == "predictive_budget"
    # the recorded series stays under the budget (the 12th trial peaks at 688 of 694 MiB): it runs
    # all 12 and recycles after the last, because the 13th is predicted to cross
    budget = 1.2 * KERAS_TF_PEAK[0]
    assert max(KERAS_TF_PEAK) <= budget
    assert n == len(KERAS_TF_PEAK)
    assert decision.values["predicted_peak_bytes"] > budget * MiB
    assert decision.values["threshold_bytes"] == int(budget * MiB)
    assert "peak_ratio budget" in decision.message


def _first_recycle_beside(policy, rss, peaks, supervisor_mib):
    for n in range(1, len(rss) + 1):
        history = WorkerHistory(n, tuple(_mib(rss[:n])), tuple(_mib(peaks[:n])), supervisor_mib * MiB)
        decision = decide_recycle(policy, history)
        if decision is not None:
            return n, decision
    return None


def test_a_budget_that_counts_the_supervisor_keeps_the_whole_tree_under_1_2x():
    policy = Policy(budget_counts_supervisor=True)
    n, decision = _first_recycle_beside(policy, KERAS_TF_RSS, KERAS_TF_PEAK, 40)
    assert decision.rule == "predictive_budget"
    budget = 1.2 * KERAS_TF_PEAK[0]
    # the tree (supervisor + worker) stays under the budget, and the worker uses what is left
    assert max(KERAS_TF_PEAK[:n]) + 40 <= budget < KERAS_TF_PEAK[n] + 40
    assert n < first_recycle(Policy(), _mib(KERAS_TF_RSS), _mib(KERAS_TF_PEAK))[0]
    assert decision.values["supervisor_counted_bytes"] == 40 * MiB
    assert "less the supervisor's 40.0 MiB" in decision.message
    # without the flag the supervisor's reading is ignored
    assert (
        _first_recycle_beside(Policy(), KERAS_TF_RSS, KERAS_TF_PEAK, 40)[0]
        == first_recycle(Policy(), _mib(KERAS_TF_RSS), _mib(KERAS_TF_PEAK))[0]
    )


def test_a_supervisor_large_next_to_the_worker_is_counted_for_half_the_headroom_only():
    # a 60 MiB worker beside a 200 MiB supervisor: the budget could never be met by recycling
    rss = [60, 61, 62, 63, 64, 65, 66, 67, 68, 69]
    policy = Policy(budget_counts_supervisor=True)
    n, decision = _first_recycle_beside(policy, rss, rss, 200)
    assert decision.values["supervisor_counted_bytes"] == pytest.approx(
        0.1 * 60 * MiB, abs=1
    )  # (1.2 - 1) x 60 / 2
    assert n >= 4  # the worker still grows into half its headroom, not recycled after each trial
    assert _first_recycle_beside(policy, [60] * 10, [60] * 10, 200) is None  # flat: never


def test_budget_counts_supervisor_must_be_a_bool():
    with pytest.raises(ConfigError, match="budget_counts_supervisor must be True, False or None"):
        Policy(budget_counts_supervisor="yes")


@pytest.mark.parametrize("peak_ratio", [1.05, 1.1, 1.15])
def test_predictive_budget_recycles_just_before_the_trial_that_would_cross_it(peak_ratio):
    # budgets the recorded series does cross: the worker is recycled after the last trial under
    # the budget, neither earlier (wasting its budget) nor after the crossing
    budget = peak_ratio * KERAS_TF_PEAK[0]
    crossing = next(i for i, p in enumerate(KERAS_TF_PEAK) if p > budget)
    n, decision = first_recycle(Policy(peak_ratio=peak_ratio), _mib(KERAS_TF_RSS), _mib(KERAS_TF_PEAK))
    assert decision.rule == "predictive_budget"
    assert n == crossing, (n, crossing)


def test_default_budget_leaves_a_flat_noisy_worker_alone():
    assert first_recycle(Policy(), _mib(FLAT_NOISY), _mib([v + 5 for v in FLAT_NOISY])) is None


def test_naive_policy_never_recycles():
    naive = Policy(predictive=False)
    assert first_recycle(naive, _mib(KERAS_TF_RSS), _mib(KERAS_TF_PEAK)) is None


def test_predictive_limit_recycles_before_memory_limit():
    policy = Policy(memory_limit=660 * MiB, peak_ratio=None, predictive_margin=0.0)
    n, decision = first_recycle(policy, _mib(KERAS_TF_RSS), _mib(KERAS_TF_PEAK))
    assert decision.rule == "predictive_limit"
    assert (
        KERAS_TF_PEAK[n - 1] <= 660 < KERAS_TF_PEAK[n] and decision.values["predicted_peak_bytes"] > 660 * MiB
    )


def test_rules_in_order_with_their_values():
    rss = _mib(KERAS_TF_RSS)
    peaks = _mib(KERAS_TF_PEAK)
    n, d = first_recycle(Policy(max_trials_per_worker=4, peak_ratio=None), rss, peaks)
    assert (n, d.rule, d.values["max_trials_per_worker"]) == (4, "max_trials", 4)
    n, d = first_recycle(Policy(recycle_above=630 * MiB, peak_ratio=None), rss, peaks)
    assert (n, d.rule, d.values["rss_bytes"]) == (7, "recycle_above", 639 * MiB)
    n, d = first_recycle(Policy(recycle_growth=50 * MiB, peak_ratio=None), rss, peaks)
    assert (n, d.rule, d.values["growth_bytes"]) == (6, "recycle_growth", 51 * MiB)


def test_few_readings_only_react_to_an_observed_crossing():
    policy = Policy(peak_ratio=1.2)
    assert decide_recycle(policy, WorkerHistory(1, (500 * MiB,), (500 * MiB,))) is None
    d = decide_recycle(policy, WorkerHistory(2, (500 * MiB, 650 * MiB), (500 * MiB, 650 * MiB)))
    assert d is not None and d.values["basis"] == "observed"


# -- kills, retries, causes ------------------------------------------------------------------------


def test_check_limits():
    p = Policy(memory_limit=1000, gpu_memory_limit=500, timeout=10)
    assert check_limits(p, rss_bytes=999, gpu_bytes=499, elapsed_s=9.9) is None
    assert check_limits(p, rss_bytes=1001, gpu_bytes=None, elapsed_s=0).status == "killed_memory"
    assert check_limits(p, rss_bytes=1, gpu_bytes=501, elapsed_s=0).status == "killed_gpu_memory"
    kill = check_limits(p, rss_bytes=1, gpu_bytes=None, elapsed_s=10.5)
    assert kill.status == "timeout" and kill.value == 10.5
    assert check_limits(Policy(), rss_bytes=10**12, gpu_bytes=10**12, elapsed_s=10**6) is None


def test_should_retry_follows_categories_and_budget():
    p = Policy(retries=2, retry_on=("crash", "memory"))
    assert should_retry(p, "crashed", 1) and should_retry(p, "crashed", 2)
    assert not should_retry(p, "crashed", 3)
    assert (
        should_retry(p, "killed_memory", 1)
        and should_retry(p, "framework_oom", 1)
        and should_retry(p, "os_oom", 1)
    )
    assert not should_retry(p, "exception", 1)
    assert not should_retry(p, "timeout", 1)
    assert not should_retry(p, "not_serializable", 1)
    assert not should_retry(p, "ok", 1)
    assert should_retry(Policy(retries=1, retry_on="exception"), "exception", 1)
    assert not should_retry(Policy(), "crashed", 1)  # retries=0 by default


def test_classify_end_names_every_cause():
    kill = KillDecision("killed_memory", 100.0, 150.0, "killed at memory_limit")
    c = classify_end(-9, in_trial=True, kill=kill)
    assert (c.attempt_status, c.worker_reason, c.detail["rss_bytes"], c.detail["limit_bytes"]) == (
        "killed_memory",
        "killed_memory",
        150,
        100,
    )
    c = classify_end(-9, in_trial=True, kill=KillDecision("timeout", 5.0, 5.2, "killed at timeout"))
    assert (c.attempt_status, c.worker_reason, c.detail["timeout_s"]) == ("timeout", "killed_timeout", 5.0)
    c = classify_end(-9, in_trial=True, oom_kills_before=0, oom_kills_after=1)
    assert (c.attempt_status, c.worker_reason) == ("os_oom", "os_oom")
    c = classify_end(137, in_trial=True, oom_kills_before=2, oom_kills_after=3)
    assert c.attempt_status == "os_oom"
    c = classify_end(-9, in_trial=True, oom_kills_before=0, oom_kills_after=0)
    assert (c.attempt_status, c.detail["signal"]) == (
        "crashed",
        "SIGKILL",
    ) and "outside trainguard" in c.message
    c = classify_end(-11, in_trial=True)
    assert (c.attempt_status, c.detail["signal"]) == (
        "crashed",
        "SIGSEGV",
    ) and "segmentation fault" in c.message
    c = classify_end(3, in_trial=True)
    assert c.attempt_status == "crashed" and "code 3" in c.message
    c = classify_end(0, in_trial=False)
    assert (c.attempt_status, c.worker_reason) == (None, "exited")


def test_a_long_serving_workers_history_is_bounded_and_decides_the_same():
    """Per-trial cost must not grow with a run's length: the supervisor's history of a worker that
    ran 100,000 trials keeps its first reading and the latest HISTORY_KEPT, the predicted peak reads
    the latest PREDICT_WINDOW at their own trial numbers, and the decisions equal those of the full
    history (the medians over every reading made a decision cost 10 ms at 15,000 trials)."""
    from trainguard.runner.policy import (
        HISTORY_KEPT,
        PREDICT_WINDOW,
        Policy,
        WorkerHistory,
        decide_recycle,
        predict_next_peak,
        recycle_expected_soon,
        worker_history,
    )

    n = 100_000
    rss = [400 * MiB + 100 * i + (7 if i % 3 else -5) for i in range(n)]  # 100 B a trial, a little noise
    peaks = [r + 50 * MiB for r in rss]
    peaks[0] += 300 * MiB  # the first trial pays the framework import
    bounded = worker_history(n, rss, peaks, 10 * MiB)
    assert len(bounded.rss_after_bytes) == len(bounded.peak_bytes) == HISTORY_KEPT + 1
    assert (
        bounded.readings == n and bounded.rss_after_bytes[0] == rss[0] and bounded.peak_bytes[0] == peaks[0]
    )
    assert bounded.rss_after_bytes[-1] == rss[-1] and PREDICT_WINDOW <= HISTORY_KEPT
    predicted = predict_next_peak(bounded)
    assert predicted is not None and abs(predicted - (rss[-1] + 100 + 50 * MiB)) < 1_000
    for policy in (
        Policy(memory_limit=rss[-1] + 50 * MiB + 50),  # the next trial's peak crosses it
        Policy(peak_ratio=1.01),
        Policy(recycle_growth=5 * MiB),
    ):
        full = WorkerHistory(n, tuple(rss), tuple(peaks), 10 * MiB)
        a, b = decide_recycle(policy, full), decide_recycle(policy, bounded)
        assert (a and a.rule) == (b and b.rule)
        assert recycle_expected_soon(policy, full) == recycle_expected_soon(policy, bounded)
    short = worker_history(10, rss[:10], peaks[:10])
    assert short == WorkerHistory(10, tuple(rss[:10]), tuple(peaks[:10]))


def test_negative_sizes_of_the_peak_models_options_say_they_are_negative():
    from trainguard import Runner

    for kwargs in ({"memory_limit": "-5MB"}, {"memory_limit": -1}):
        with pytest.raises(ConfigError, match=r"memory_limit=.* is negative: give a size such as '4GB'$"):
            Policy(**kwargs)
    with pytest.raises(ConfigError, match=r"memory_budget='-5MB' is negative: give a size such as '4GB'$"):
        Runner(workers=1, memory_budget="-5MB")
    with pytest.raises(ConfigError, match=r"memory_budget=0 must be a size above 0, such as '6GB'$"):
        Runner(workers=1, memory_budget=0)
    with pytest.raises(ConfigError, match=r"predict_peaks must be True or False"):
        Policy(predict_peaks="yes")
