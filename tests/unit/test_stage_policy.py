"""policy.decide_stage: when a staged trial's worker leaves at a checkpoint (pure, recorded series)."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.runner.policy import Policy, WorkerHistory, decide_recycle, decide_stage

MiB = 2**20


def _history(peaks_mib):
    peaks = tuple(int(p * MiB) for p in peaks_mib)
    return WorkerHistory(len(peaks), tuple(p - 5 * MiB for p in peaks), peaks)


def test_max_stages_per_worker_counts_this_workers_stages():
    policy = Policy(max_stages_per_worker=3, predictive=False)
    assert decide_stage(policy, _history([500, 500])) is None
    decision = decide_stage(policy, _history([500, 500, 500]))
    assert decision.rule == "max_stages" and "ran 3 stages (max_stages_per_worker=3)" == decision.message
    # the trial-count rule is not a stage rule
    assert decide_stage(Policy(max_trials_per_worker=1, predictive=False), _history([500] * 5)) is None


def test_growth_per_stage_predicted_past_the_budget_leaves_before_it():
    policy = Policy(peak_ratio=1.2)
    flat = _history([600, 601, 599, 600, 602, 600])
    assert decide_stage(policy, flat) is None
    growing = _history([600, 625, 650, 675, 700])  # +25 MiB a stage: the next ~725 > 1.2 x 600
    decision = decide_stage(policy, growing)
    assert decision is not None and decision.rule == "predictive_budget"
    assert "next stage's peak predicted" in decision.message and "/stage" in decision.message
    assert decision.values["stages_done"] == 5
    assert decide_stage(policy, _history([600, 625, 650])) is None  # more stages fit
    # the same series between trials says "trial"
    assert "next trial's peak" in decide_recycle(policy, growing).message


def test_memory_limit_applies_per_stage():
    policy = Policy(memory_limit="700MiB", peak_ratio=None)
    decision = decide_stage(policy, _history([600, 620, 640, 660]))
    assert decision is not None and decision.rule == "predictive_limit"


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True])
def test_bad_max_stages_is_one_line(value):
    with pytest.raises(ConfigError, match="max_stages_per_worker=") as err:
        Policy(max_stages_per_worker=value)
    assert "\n" not in str(err.value)
