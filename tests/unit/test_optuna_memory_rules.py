"""memory_constraints' rule (pure: user attributes in, Optuna's constraint values out), its bad
input, and the peak fit's own t and F tails against scipy's."""

from __future__ import annotations

import pickle

import pytest

from trainguard.exceptions import ConfigError
from trainguard.integrations._optuna_memory import KILLED_VIOLATION, constraint_values, memory_constraints

MB = 10**6


def test_the_fraction_over_the_limit_is_the_value_and_a_memory_death_is_always_infeasible():
    limit = 200 * MB
    assert constraint_values({"trainguard_peak_rss_bytes": 100 * MB}, limit) == (-0.5,)
    assert constraint_values({"trainguard_peak_rss_bytes": 300 * MB}, limit) == (0.5,)
    assert constraint_values({}, limit) == (0.0,)  # not measured: nothing says it is over
    # killed under the constraint's limit (the OS, a smaller memory_limit): still infeasible
    killed = {"trainguard_peak_rss_bytes": 150 * MB, "trainguard_status": "os_oom"}
    assert constraint_values(killed, limit) == (KILLED_VIOLATION,)
    assert constraint_values({**killed, "trainguard_peak_rss_bytes": 400 * MB}, limit) == (1.0,)
    # a GPU kill makes the GPU value infeasible, or the RSS one when no GPU limit is given
    gpu = {
        "trainguard_peak_rss_bytes": 100 * MB,
        "trainguard_peak_gpu_bytes": 50 * MB,
        "trainguard_status": "killed_gpu_memory",
    }
    assert constraint_values(gpu, limit, 100 * MB) == (-0.5, KILLED_VIOLATION)
    assert constraint_values(gpu, limit) == (KILLED_VIOLATION,)
    assert (
        constraint_values({"trainguard_status": "timeout", "trainguard_peak_rss_bytes": 10 * MB}, limit)[0]
        < 0
    )


def test_memory_constraints_reads_a_trials_user_attrs_and_pickles():
    class Frozen:
        user_attrs = {"trainguard_peak_rss_bytes": 3 * 2**30}

    constraints = memory_constraints("2GiB", gpu_limit="1GB")
    assert constraints.limit_bytes == 2 * 2**30 and constraints.gpu_limit_bytes == 10**9
    assert constraints(Frozen()) == (0.5, 0.0)
    assert pickle.loads(pickle.dumps(constraints)) == constraints
    assert repr(constraints) == "memory_constraints('2.0 GiB', gpu_limit='953.7 MiB')"


@pytest.mark.parametrize("bad", ["0", 0, "-4GB", -5, "4 parsecs", "", None, True, [1]])
def test_bad_limits_are_one_line_config_errors_with_an_example(bad):
    with pytest.raises(ConfigError) as err:
        memory_constraints(bad)
    text = str(err.value)
    assert "\n" not in text and "'4GB'" in text, text
    with pytest.raises(ConfigError, match="gpu_limit"):
        memory_constraints("4GB", gpu_limit=bad if bad is not None else "0")


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("-5MB", "is negative"),
        (-5, "is negative"),
        ("0MB", "is 0 bytes"),
        (0.4, "is a fraction of a byte"),
        ("lots", "is not a size"),
    ],
)
def test_a_negative_or_zero_limit_says_so_with_a_valid_example(bad, words):
    with pytest.raises(ConfigError) as err:
        memory_constraints(bad)
    assert str(err.value) == f"limit={bad!r} {words}: give a size above 0, as in memory_constraints('4GB')"
    with pytest.raises(ConfigError) as err:
        memory_constraints("4GB", gpu_limit=bad)
    assert str(err.value).startswith(
        f"gpu_limit={bad!r} {words}: give a size above 0, as in memory_constraints("
    )


def test_the_t_and_f_tails_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    from trainguard.runner.policy._tdist import f1_survival, t_quantile

    for df in (1, 2, 3, 7, 30, 500):
        for p in (0.5, 0.8, 0.975, 0.9995, 0.1):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9, abs=1e-12)
        for f in (0.0, 0.3, 2.0, 15.0, 300.0):
            assert f1_survival(f, df) == pytest.approx(stats.f.sf(f, 1, df), rel=1e-8, abs=1e-300)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)
