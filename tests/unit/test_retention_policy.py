"""Why a recycled worker grew, decided on recorded series: a leak, retention, or no cause."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.leaks.stats import TRIAL_RISE_BYTES, robust_slope
from trainguard.outcomes import WorkerReason
from trainguard.runner.policy import (
    Policy,
    WorkerHistory,
    decide_recycle,
    first_recycle,
    growth_cause,
    slope_interval,
)
from trainguard.runner.policy._retention import RETENTION_MIN_GROWTH_BYTES, RETENTION_MIN_READINGS

# Recorded on this repo's test machine (glibc 2.36, one local worker, Policy(predictive=False)): the
# worker's RSS after each of 10 trials and its allocator's bytes in use (mallinfo2) after them.
# RETENTION: each trial makes 100,000 x (k + 1) small tuples and keeps one in 4096: pymalloc's
# arenas stay pinned, RSS grows ~10 MiB a trial, bytes in use ~2 KiB.
RETENTION_RSS = [
    38694912,
    48812032,
    59473920,
    70492160,
    80633856,
    91377664,
    101818368,
    112267264,
    122712064,
    132661248,
]
RETENTION_IN_USE = [4912800, 4912800, 4915536, 4916496, 4918240, 4922944, 4927824, 4930416, 4932592, 4933872]
# LEAK: each trial keeps an 8 MiB bytearray.
LEAK_RSS = [
    37556224,
    45953024,
    54345728,
    62738432,
    71131136,
    79523840,
    87916544,
    96309248,
    104701952,
    113094656,
]
LEAK_IN_USE = [
    13304448,
    21697152,
    30089856,
    38482560,
    46875264,
    55267968,
    63660672,
    72053376,
    80446080,
    88838784,
]
# FLAT: each trial allocates and frees 8 MB of 4000-byte buffers.
FLAT_RSS = [29077504] + [29081600] * 9
FLAT_IN_USE = [4911744] * 10

#: a policy whose growth rule fires on the recorded growth after enough trials to name a cause
POLICY = Policy(recycle_growth="60MB", predictive=False)


def _peaks(rss):
    return [r + (6 << 20) for r in rss]


def test_retention_recycles_for_retention_after_a_trim():
    n, decision = first_recycle(POLICY, RETENTION_RSS, _peaks(RETENTION_RSS), RETENTION_IN_USE)
    assert decision.rule == "recycle_growth"
    assert decision.cause == "retention"
    assert decision.cause == "retention" and decision.reason is WorkerReason.RECYCLED
    assert decision.trim_first  # malloc_trim(0) is tried before the recycle
    assert (
        "retention" in decision.message
        and "stayed flat" in decision.message
        and "keeps freed memory" in decision.message
    )
    assert decision.values["rss_growth_per_trial_bytes"] > 9 * 2**20
    assert abs(decision.values["in_use_growth_per_trial_bytes"]) < 8 * 2**10
    # decided again on the RSS after the trim: recycled now, for the same cause
    history = WorkerHistory(
        n,
        tuple(RETENTION_RSS[:n]),
        tuple(_peaks(RETENTION_RSS)[:n]),
        bytes_in_use=tuple(RETENTION_IN_USE[:n]),
        trimmed=True,
    )
    again = decide_recycle(POLICY, history)
    assert again is not None and again.cause == "retention" and not again.trim_first


def test_both_growing_is_a_leak_never_retention():
    _, decision = first_recycle(POLICY, LEAK_RSS, _peaks(LEAK_RSS), LEAK_IN_USE)
    assert decision.cause == "leak"
    assert decision.cause == "leak" and decision.reason is WorkerReason.RECYCLED
    assert not decision.trim_first
    # bytes in use growing by a fifth of RSS's growth (under the leak's quarter) is not retention either
    partly = [b + (i * 2 << 20) for i, b in enumerate(RETENTION_IN_USE)]
    _, decision = first_recycle(POLICY, RETENTION_RSS, _peaks(RETENTION_RSS), partly)
    assert decision.cause is None and decision.reason is WorkerReason.RECYCLED


def test_flat_worker_is_not_recycled_and_has_no_cause():
    assert first_recycle(POLICY, FLAT_RSS, _peaks(FLAT_RSS), FLAT_IN_USE) is None
    assert first_recycle(Policy(), FLAT_RSS, _peaks(FLAT_RSS), FLAT_IN_USE) is None
    assert growth_cause(FLAT_RSS, FLAT_IN_USE) is None


def test_no_cause_from_too_few_readings_or_none_of_bytes_in_use():
    k = RETENTION_MIN_READINGS - 1
    assert growth_cause(RETENTION_RSS[:k], RETENTION_IN_USE[:k]) is None
    assert growth_cause(RETENTION_RSS, [None] * len(RETENTION_RSS)) is None
    # a rule that fires before the cause can be read recycles as before, without one
    _, early = first_recycle(
        Policy(recycle_growth="15MB", predictive=False),
        RETENTION_RSS,
        _peaks(RETENTION_RSS),
        RETENTION_IN_USE,
    )
    assert early.cause is None and early.reason is WorkerReason.RECYCLED and not early.trim_first
    # a count limit is not a memory rule: no cause
    _, counted = first_recycle(
        Policy(max_trials_per_worker=8, predictive=False),
        RETENTION_RSS,
        _peaks(RETENTION_RSS),
        RETENTION_IN_USE,
    )
    assert counted.rule == "max_trials" and counted.cause is None


def test_noise_in_both_series_keeps_the_cause():
    # RSS swinging by +-3 MiB and bytes in use by +-200 KiB about the recorded lines: still retention
    swing = [3, -2, 1, -3, 2, 0, -1, 3, -3, 1]
    rss = [r + s * 2**20 for r, s in zip(RETENTION_RSS, swing, strict=True)]
    in_use = [b + s * 64 * 2**10 for b, s in zip(RETENTION_IN_USE, reversed(swing), strict=True)]
    cause = growth_cause(rss, in_use)
    assert cause is not None and cause.kind == "retention"
    # RSS growing within its noise only: no cause (and bytes in use flat does not make one)
    wobble = [60 * 2**20 + s * 4 * 2**20 for s in swing]
    assert growth_cause(wobble, RETENTION_IN_USE) is None


def test_slope_interval_is_the_leak_checks_robust_slope():
    for series in (RETENTION_RSS, LEAK_IN_USE, [float(x) for x in [5, 9, 4, 12, 8, 15, 11, 19, 14, 22, 17]]):
        ours, theirs = slope_interval(series), robust_slope(series)
        assert ours.slope == pytest.approx(theirs.slope, rel=1e-9)
        assert ours.low == pytest.approx(theirs.ci_low, rel=1e-6, abs=1e-6)
        assert ours.high == pytest.approx(theirs.ci_high, rel=1e-6, abs=1e-6)
    assert RETENTION_MIN_GROWTH_BYTES == TRIAL_RISE_BYTES


def test_bytes_in_use_of_another_length_is_refused():
    with pytest.raises(ConfigError, match="one reading per trial"):
        first_recycle(POLICY, RETENTION_RSS, _peaks(RETENTION_RSS), RETENTION_IN_USE[:-1])
