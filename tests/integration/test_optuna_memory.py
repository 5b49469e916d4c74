"""Memory in real guarded Optuna studies: every trial's measured and predicted peak, memory as a
sampler constraint (Optuna's constraints_func and trial.set_constraint), memory as an objective,
and configs the peak model puts over the limit not started.

The objective (optuna_objectives.allocates) holds ``mb`` MiB and scores better the larger it is,
so the sampler is drawn to configs over the limit; the worker's baseline (Python, numpy,
trainguard) comes on top, about 45-60 MiB.
"""

from __future__ import annotations

import statistics
import warnings

import pytest

optuna = pytest.importorskip("optuna")

from optuna_objectives import allocates, tiny  # noqa: E402

import trainguard.optuna as tgo  # noqa: E402
from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner import Policy  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
TS = optuna.trial.TrialState
LIMIT = tgo.memory_constraints("200MB")
POLICY = Policy(memory_limit="330MB")  # a trial of mb over about 270 is killed


def _peak(trial):
    return trial.user_attrs.get("trainguard_peak_rss_bytes")


def test_a_constrained_study_records_every_peak_and_never_picks_a_config_over_the_limit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Optuna 5 deprecates constraints_func
        sampler = optuna.samplers.TPESampler(seed=1, n_startup_trials=8, constraints_func=LIMIT)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.enqueue_trial({"mb": 380, "lr": 0.5})  # killed, whatever the sampler draws
    study.enqueue_trial({"mb": 200, "lr": 0.5})  # over the constraint's limit, under memory_limit
    tgo.optimize(study, allocates, n_trials=22, policy=POLICY, sample_interval="20ms")
    trials = study.trials
    assert len(trials) == 22
    # every trial, whatever became of it, has its measured peak, or was not started for its
    # prediction, and a prediction (None: unknown)
    skipped = [t for t in trials if t.user_attrs.get("trainguard_status") == "predicted_over_limit"]
    assert all(_peak(t) or t in skipped for t in trials)
    assert all("trainguard_predicted_peak_bytes" in t.user_attrs for t in trials)
    predicted = [t.user_attrs["trainguard_predicted_peak_bytes"] for t in trials]
    assert predicted[:6] == [None] * 6  # the model needs 5 finished ok trials (trial 0 is a kill)
    late = [
        (p, _peak(t))
        for p, t in zip(predicted[10:], trials[10:], strict=True)
        if p and t.state == TS.COMPLETE
    ]
    assert len(late) >= 5
    errors = [abs(p - m) / m for p, m in late]
    assert statistics.median(errors) < 0.2, errors  # measured: 2-4 %
    # a memory kill ends PRUNED with its cause, infeasible; every trial's constraint agrees with its peak
    for t in trials:
        (value,) = t.constraints.values()
        if t.user_attrs.get("trainguard_status") == "killed_memory":
            assert t.state == TS.PRUNED and value > 0
        elif t in skipped:  # its whole predicted interval over the limit: never run, infeasible
            assert t.state == TS.PRUNED and value > 0 and _peak(t) is None
            assert t.user_attrs["trainguard_predicted_low_bytes"] > LIMIT.limit_bytes
        else:
            assert t.state == TS.COMPLETE
            assert (value > 0) == (_peak(t) > LIMIT.limit_bytes)
    assert any(t.state == TS.PRUNED for t in trials) and any(
        t.constraints["0"] > 0 for t in trials if t.state == TS.COMPLETE
    )
    # the best trial fits, though configs scoring better were tried (over the limit)
    best = study.best_trial
    assert _peak(best) <= LIMIT.limit_bytes
    assert any(t.value is not None and t.value < best.value for t in trials if t.state == TS.COMPLETE)


def test_memory_as_a_second_objective_with_set_constraint_and_a_retried_kill():
    study = optuna.create_study(
        directions=["minimize", "minimize"], sampler=optuna.samplers.NSGAIISampler(seed=0)
    )
    for mb in (20, 380, 230, 90):
        study.enqueue_trial({"mb": mb, "lr": 0.5})
    tgo.optimize(
        study,
        allocates,
        n_trials=4,
        policy=Policy(memory_limit="330MB", retries=1),
        constraints=LIMIT,
        memory_objective=True,
        sample_interval="20ms",
    )
    by_mb: dict[int, list] = {}
    for t in study.trials:
        by_mb.setdefault(t.params["mb"], []).append(t)
    # ok trials: (value, peak bytes), the peak as recorded; set_constraint's value by name
    for mb in (20, 230, 90):
        (t,) = by_mb[mb]
        assert t.state == TS.COMPLETE and t.values == [-mb + 0.5, float(_peak(t))]
        assert (t.constraints["trainguard_memory"] > 0) == (mb == 230)
    # the kill is retried once (the first attempt FAILs as before), then PRUNED and infeasible
    first, retry = by_mb[380]
    assert first.state == TS.FAIL and first.user_attrs["trainguard_retried"] is True
    assert retry.state == TS.PRUNED and retry.user_attrs["trainguard_status"] == "killed_memory"
    assert retry.constraints["trainguard_memory"] > 0
    # the Pareto front leaves the infeasible 230 out: more memory for a better value, feasible only
    assert {t.params["mb"] for t in study.best_trials} == {20, 90}


def test_memory_objective_and_constraints_bad_input_are_one_line_errors():
    for directions in (["minimize"], ["minimize"] * 3):  # one value (tiny's) + memory = 2 directions
        with pytest.raises(ConfigError) as err:
            tgo.optimize(optuna.create_study(directions=directions), tiny, n_trials=1, memory_objective=True)
        assert "\n" not in str(err.value) and "memory" in str(err.value)
    assert "directions=['minimize', 'minimize']" in str(err.value) or "one more for memory" in str(err.value)
    with pytest.raises(ConfigError, match="memory_constraints\\('4GB'\\)"):
        tgo.isolated(tiny, constraints="4GB")
    with pytest.raises(ConfigError, match="True or False"):
        tgo.isolated(tiny, memory_objective="yes")


def test_a_trial_predicted_over_the_limit_is_never_started(tmp_path):
    """Once the peak model knows how the peak grows with ``width``, a sampled width whose whole
    predicted interval is over the limit ends PRUNED and infeasible, its objective never entered."""
    from optuna_objectives import counted_width

    calls = tmp_path / "calls.txt"
    limit = tgo.memory_constraints("200MB")
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=6))
    for width in (10, 30, 50, 70, 90, 110):  # the model's first region, all under the limit
        study.enqueue_trial({"width": width})
    for width in (500, 120):  # far over: not started; near it (its interval includes fitting): runs
        study.enqueue_trial({"width": width})
    tgo.optimize(
        study,
        counted_width,
        n_trials=18,
        policy=Policy(memory_limit="400MB"),
        constraints=limit,
        env={"TRAINGUARD_TEST_CALLS": str(calls)},
        sample_interval="20ms",
    )
    entered = sorted(int(line) for line in calls.read_text().split())
    skipped = [t for t in study.trials if t.user_attrs.get("trainguard_status") == "predicted_over_limit"]
    assert len(study.trials) == 18 and skipped
    assert 6 in {t.number for t in skipped} and 7 in entered  # the enqueued 500 and 120
    assert entered == sorted(t.number for t in study.trials if t not in skipped)
    for t in skipped:
        low = t.user_attrs["trainguard_predicted_low_bytes"]
        assert t.state == TS.PRUNED and low > limit.limit_bytes
        assert (
            t.user_attrs["trainguard_predicted_high_bytes"]
            >= t.user_attrs["trainguard_predicted_peak_bytes"]
            >= low
        )
        assert "not started: predicted peak" in t.user_attrs["trainguard_message"]
        assert _peak(t) is None and t.constraints["trainguard_memory"] > 0
        assert (
            t.params["width"] * 2**20 > limit.limit_bytes - 40 * 2**20
        )  # the worker's baseline is 45-60 MiB
    # every trial that ran had an interval reaching under the limit, or no prediction yet
    for t in study.trials:
        if t not in skipped and t.user_attrs.get("trainguard_predicted_low_bytes") is not None:
            assert t.user_attrs["trainguard_predicted_low_bytes"] <= limit.limit_bytes
    assert study.best_trial.params["width"] < 200 and _peak(study.best_trial) <= limit.limit_bytes
