"""trainguard.optuna with real worker processes and real Optuna studies (in-memory and SQLite storage)."""

from __future__ import annotations

import gc
import os
import sys
import threading

import psutil
import pytest

optuna = pytest.importorskip("optuna")

from optuna_objectives import faulty, hoards, quadratic, returns, steps, tiny  # noqa: E402

import trainguard  # noqa: E402
import trainguard.optuna as tgo  # noqa: E402
from trainguard.exceptions import ConfigError, MissingDependencyError, UnitError  # noqa: E402
from trainguard.integrations import optuna as tgo_impl  # noqa: E402
from trainguard.leaks.stats import robust_slope  # noqa: E402
from trainguard.runner import Policy  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
MiB = 2**20
TS = optuna.trial.TrialState


def _study(**kwargs):
    kwargs.setdefault("sampler", optuna.samplers.RandomSampler(seed=0))
    return optuna.create_study(**kwargs)


def _consistent(study):
    """Nothing left RUNNING: every trial asked was told."""
    return all(t.state != TS.RUNNING for t in study.get_trials(deepcopy=False))


# -- the proxy, parallel workers, any storage ------------------------------------------------------


def _recycles(store_path, name):
    from trainguard.store import Store

    with Store(store_path, readonly=True) as store:
        return [e for e in store.events(store.get_run(f"{name}-0").run_id, kinds=["recycle"])]


def test_the_default_policy_counts_the_study_process_against_the_budget(tmp_path):
    assert tgo.default_policy() == Policy(budget_counts_supervisor=True)
    store = tmp_path / "runs.db"
    tgo.optimize(_study(), hoards, n_trials=6, store=store, name="counted")
    recycles = _recycles(store, "counted")
    assert recycles and all(r.data["supervisor_counted_bytes"] > 0 for r in recycles), recycles
    assert "less the supervisor's" in recycles[0].message
    # a policy the user gives counts it too, unless it says not to
    tgo.optimize(_study(), hoards, n_trials=6, store=store, name="given", policy=Policy(timeout="1m"))
    assert all(r.data["supervisor_counted_bytes"] > 0 for r in _recycles(store, "given"))
    uncounted = Policy(budget_counts_supervisor=False)
    tgo.optimize(_study(), hoards, n_trials=6, store=store, name="plain", policy=uncounted)
    plain = _recycles(store, "plain")
    assert plain and all("supervisor_counted_bytes" not in r.data for r in plain)


def test_optimize_runs_each_trial_in_a_reused_worker_with_sqlite_storage(tmp_path):
    study = _study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="q")
    tgo.optimize(study, quadratic, n_trials=8, workers=2)
    trials = study.trials
    assert len(trials) == 8 and all(t.state == TS.COMPLETE for t in trials)
    pids = {t.user_attrs["pid"] for t in trials}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # two workers, reused
    for t in trials:
        assert t.user_attrs["number_seen"] == t.number
        assert set(t.params) == {"x", "n", "kind", "lr"} and -10 <= t.params["x"] <= 10
        assert t.user_attrs["trainguard_peak_rss_bytes"] > 5 * MiB
        assert t.user_attrs["trainguard_duration_s"] > 0
        assert t.value == pytest.approx(
            (t.params["x"] - 2) ** 2 + t.params["n"] + (t.params["kind"] == "b") + t.params["lr"]
        )
    # a worker's later trials carry their growth against its previous one (the trackers' column)
    assert sum("trainguard_growth_bytes" in t.user_attrs for t in trials) >= 8 - len(pids)
    # the same study, reloaded from its file: the parent wrote everything
    again = optuna.load_study(study_name="q", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len(again.trials) == 8


def test_drop_in_wrapper_and_seeded_studies_agree():
    inproc = _study(sampler=optuna.samplers.TPESampler(seed=3))
    inproc.optimize(quadratic, n_trials=12)
    guarded = _study(sampler=optuna.samplers.TPESampler(seed=3))
    with tgo.isolated(quadratic) as objective:
        guarded.optimize(objective, n_trials=12)
    assert [t.params for t in guarded.trials] == [t.params for t in inproc.trials]
    assert guarded.best_value == inproc.best_value and guarded.best_params == inproc.best_params
    assert all(t.user_attrs["pid"] != os.getpid() for t in guarded.trials)


def test_median_pruner_prunes_through_the_proxy():
    study = _study(pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1))
    for x in (1.0, 2.0, 3.0, 9.0, 8.0, 0.5):  # three low trials set the median; the high ones are pruned
        study.enqueue_trial({"x": x})
    tgo.optimize(study, steps, n_trials=6)
    states = {t.params["x"]: t.state for t in study.trials}
    assert states[9.0] == TS.PRUNED and states[8.0] == TS.PRUNED
    assert states[1.0] == states[0.5] == TS.COMPLETE
    pruned = study.trials[3]
    assert pruned.user_attrs["pruned_at"] == 1 and set(pruned.intermediate_values) == {0, 1}


# -- workers that die ------------------------------------------------------------------------------


def test_killed_timed_out_and_crashed_trials_fail_with_their_cause_and_the_study_goes_on():
    study = _study()
    for fault in ("ok", "alloc", "ok", "sleep", "kill", "ok"):
        study.enqueue_trial({"fault": fault})
    policy = Policy(memory_limit="300MB", timeout="3s")
    tgo.optimize(study, faulty, n_trials=6, policy=policy)
    assert len(study.trials) == 6 and _consistent(study)
    by_fault = {t.params["fault"]: t for t in study.trials}
    assert [t.state for t in study.trials if t.params["fault"] == "ok"] == [TS.COMPLETE] * 3
    alloc = by_fault["alloc"]
    assert alloc.state == TS.FAIL and alloc.user_attrs["trainguard_status"] == "killed_memory"
    assert "memory" in alloc.user_attrs["trainguard_message"]
    assert alloc.user_attrs["trainguard_peak_rss_bytes"] >= 300 * 10**6
    assert by_fault["sleep"].user_attrs["trainguard_status"] == "timeout"
    assert by_fault["kill"].user_attrs["trainguard_status"] == "crashed"
    assert "SIGKILL" in by_fault["kill"].user_attrs["trainguard_message"]


def test_retries_enqueue_the_same_params_and_do_not_count_against_n_trials():
    study = _study()
    for fault in ("alloc", "ok", "ok"):
        study.enqueue_trial({"fault": fault})
    tgo.optimize(study, faulty, n_trials=3, policy=Policy(memory_limit="300MB", retries=1))
    trials = study.trials
    assert len(trials) == 4 and _consistent(study)  # 3 + the retry
    failed = [t for t in trials if t.state == TS.FAIL]
    assert [t.params for t in failed] == [{"fault": "alloc"}] * 2
    first, retry = failed
    assert (
        retry.user_attrs["trainguard_retry_of"] == first.number
        and retry.user_attrs["trainguard_attempt"] == 2
    )
    assert first.user_attrs["trainguard_retried"] is True


def test_drop_in_marks_a_killed_trial_failed_without_catch():
    study = _study()
    for fault in ("alloc", "ok"):
        study.enqueue_trial({"fault": fault})
    with tgo.isolated(faulty, policy=Policy(memory_limit="300MB")) as objective:
        study.optimize(objective, n_trials=2)  # no catch=: the study still goes on
    assert [t.state for t in study.trials] == [TS.FAIL, TS.COMPLETE]
    assert study.trials[0].user_attrs["trainguard_status"] == "killed_memory"


# -- the parent stays flat -------------------------------------------------------------------------


def test_parent_memory_stays_flat_over_200_tiny_trials():
    proc = psutil.Process()
    rss: list[int] = []
    gc.collect()
    before = {id(o) for o in gc.get_objects() if isinstance(o, (tgo_impl._TrialJob, tgo_impl.CallPool))}

    def record(study, trial):
        rss.append(proc.memory_info().rss)

    baseline = _study()
    baseline.optimize(tiny, n_trials=200, callbacks=[record])
    inproc = robust_slope(rss[50:])
    rss.clear()
    study = _study()
    tgo.optimize(study, tiny, n_trials=200, callbacks=[record])
    guarded = robust_slope(rss[50:])
    print(
        f"parent RSS slope: in-process {inproc.slope / 1024:+.2f} KiB/trial, "
        f"guarded {guarded.slope / 1024:+.2f} KiB/trial (95% CI {guarded.ci_low / 1024:+.2f}.."
        f"{guarded.ci_high / 1024:+.2f}), total {(rss[-1] - rss[0]) / MiB:+.2f} MiB"
    )
    assert len(study.trials) == 200 and all(t.state == TS.COMPLETE for t in study.trials)
    # measured: in-process 0.0, guarded 1.2-1.9 KiB/trial (the study's own records: two more user
    # attributes per trial, each a copied dict in the in-memory storage), CI +-0.2. Keeping any
    # per-trial state of ours (job, trial, result, connection, thread) would add more than that.
    assert guarded.slope - inproc.slope < 4 * 1024
    gc.collect()
    leftovers = [
        o
        for o in gc.get_objects()
        if isinstance(o, (tgo_impl._TrialJob, tgo_impl.CallPool)) and id(o) not in before
    ]
    assert leftovers == []  # the run's pool and its 200 jobs are gone
    assert not [t for t in threading.enumerate() if t.name.startswith("trainguard-optuna")]


# -- bad input: one line each, the study consistent ------------------------------------------------


def test_optuna_not_installed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(MissingDependencyError) as err:
        tgo.isolated(tiny)
    assert "pip install -e '.[optuna]'` in your trainguard clone" in str(err.value) and "\n" not in str(
        err.value
    )
    import trainguard.optuna  # noqa: F401 - the module itself imports without optuna


def test_an_objective_that_cannot_be_sent_to_a_worker_fails_before_any_trial():
    lock = threading.Lock()

    def holds_a_lock(trial):
        with lock:
            return 1.0

    study = _study()
    with pytest.raises(ConfigError) as err:
        tgo.optimize(study, holds_a_lock, n_trials=3)
    message = str(err.value)
    assert "cannot be sent to a worker" in message and "\n" not in message
    assert study.trials == []


@pytest.mark.parametrize(
    ("what", "directions", "expected"),
    [
        ("pair", ["minimize"], "returned 2 values for trial 1 but the study has 1 direction"),
        ("float", ["minimize", "maximize"], "returned 1 value for trial 1 but the study has 2 directions"),
        ("none", ["minimize"], "returned None for trial 1: return a float"),
        ("text", ["minimize"], "returned a str ('high') for trial 1: return a float"),
    ],
)
def test_bad_return_values_stop_with_one_line_and_leave_the_study_consistent(what, directions, expected):
    study = _study(directions=directions)
    study.enqueue_trial({"what": "float" if len(directions) == 1 else "pair"})
    study.enqueue_trial({"what": what})
    study.enqueue_trial({"what": "float"})
    with pytest.raises(ConfigError) as err:
        tgo.optimize(study, returns, n_trials=3)
    assert expected in str(err.value) and "\n" not in str(err.value)
    # the third trial, enqueued by the test, still waits for the next optimize()
    assert [t.state for t in study.trials] == [TS.COMPLETE, TS.FAIL, TS.WAITING] and _consistent(study)


def test_nan_fails_that_trial_only_and_an_exception_is_reraised_like_in_process():
    study = _study()
    for what in ("float", "nan", "float"):
        study.enqueue_trial({"what": what})
    tgo.optimize(study, returns, n_trials=3)
    assert [t.state for t in study.trials] == [TS.COMPLETE, TS.FAIL, TS.COMPLETE]
    assert study.trials[1].user_attrs["trainguard_status"] == "nan"
    study.enqueue_trial({"what": "raise"})
    with pytest.raises(ValueError, match="bad batch size"):
        tgo.optimize(study, returns, n_trials=1)
    assert study.trials[-1].state == TS.FAIL and _consistent(study)
    study.enqueue_trial({"what": "raise"})
    tgo.optimize(study, returns, n_trials=1, catch=(ValueError,))  # caught: the study goes on
    assert study.trials[-1].state == TS.FAIL


def test_bad_arguments_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="n_trials=0 must be"):
        tgo.optimize(_study(), tiny, n_trials=0)
    with pytest.raises(ConfigError, match="study must be an optuna.Study"):
        tgo.optimize("study", tiny, n_trials=1)
    with pytest.raises(UnitError):
        tgo.optimize(_study(), tiny, n_trials=1, timeout="4 potatoes")
    with pytest.raises(ConfigError, match="workers=0"):
        tgo.isolated(tiny, workers=0)
    from trainguard.runner.policy import Shrink

    with pytest.raises(ConfigError, match="cannot shrink an Optuna trial's params"):
        tgo.isolated(tiny, policy=Policy(on_oom=Shrink()))
    assert trainguard.optuna is tgo


def test_a_drop_in_objective_left_to_the_garbage_collector_ends_its_workers():
    # what ran before this test (an earlier test's resource trackers, say) is not this test's
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    study = _study()
    study.optimize(tgo.isolated(tiny), n_trials=3)  # no with, no close(): the wrapper is unreferenced
    gc.collect()
    assert len(study.trials) == 3 and all(t.state == TS.COMPLETE for t in study.trials)
    assert not [t for t in threading.enumerate() if t.name.startswith("trainguard-optuna")]
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []
