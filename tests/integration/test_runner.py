"""The Runner with real worker processes and a real SQLite store, on tiny pure-Python trials."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

import trainguard
from _waits import wait_for, wait_gone
from trainguard.exceptions import (
    ConfigError,
    FrameworkOOMError,
    MemoryLimitError,
    TrialError,
    TrialTimeoutError,
    UnitError,
    WorkerCrashedError,
)
from trainguard.runner import Policy, Runner, find_allocator
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = str(HERE / "runner_trials.py")


def ref(name: str) -> str:
    return f"{TRIALS}:{name}"


#: the runner's kill, timeout, crash and resume tests run under the Linux tier and again under the
#: portable one (psutil and a process group only: what macOS gets), marked ``portable`` for the
#: hosted CI's macOS and Windows jobs
#: (not on Windows: these send POSIX signals and read /proc; the Windows start has its own test,
#: tests/integration/test_worker_sockets.py)
TIERS = pytest.mark.parametrize(
    "tier",
    [
        "auto",
        pytest.param(
            "portable",
            marks=[
                pytest.mark.portable,
                pytest.mark.skipif(
                    sys.platform == "win32", reason="POSIX signals and /proc: see test_worker_sockets.py"
                ),
            ],
        ),
    ],
)


# -- results, order, fn forms ----------------------------------------------------------------------


def test_map_returns_input_order_and_imap_yields_as_finished(tmp_path):
    params = [{"x": 0, "sleep_s": 0.6}] + [{"x": i, "sleep_s": 0.01} for i in range(1, 6)]
    with Runner(workers=2, store=tmp_path / "r.db") as runner:
        finished = [r.index for r in runner.imap(ref("echo"), params, name="imap")]
        results = runner.map(ref("echo"), params, name="map")
    assert sorted(finished) == list(range(6)) and finished[0] != 0  # the slow trial 0 came later
    assert [r.index for r in results] == list(range(6))
    assert [r.value["x"] for r in results] == list(range(6))
    r0 = results[0]
    assert (r0.status, r0.error, r0.attempts) == ("ok", None, 1)
    assert r0.worker_id in (0, 1) and r0.peak_rss_bytes > 5 * 2**20 and r0.duration_s >= 0.6
    assert len({r.value["pid"] for r in results}) == 2  # two workers, each reused


def test_a_worker_imports_none_of_the_driver_side(tmp_path):
    # the worker program lives inside trainguard.runner, whose names load on first use: a fresh worker
    # imports its own modules (the channel, the trial's context, the tree's kill), not the Runner, its
    # session, the store or numpy (halving what a worker start costs: BENCHMARKS.md)
    runner = Runner(workers=1, store=tmp_path / "s.db")
    (result,) = runner.map(ref("imported"), [{}], name="imports")
    assert result.status == "ok", result.error
    loaded = set(result.value)
    assert "trainguard.runner.worker.context" in loaded
    driver = (
        "trainguard.runner._runner",
        "trainguard.runner.session",
        "trainguard.store",
        "numpy",
        "sqlite3",
    )
    assert sorted(m for m in loaded if m.startswith(driver)) == []


def _closure_factory(offset):
    def add(params):
        return params["x"] + offset

    return add


def test_every_fn_form_works(tmp_path):
    params = [{"x": 1}, {"x": 2}]
    with Runner(store=None) as runner:
        assert [r.value for r in runner.map(_closure_factory(10), params)] == [11, 12]  # cloudpickled
        assert [r.value for r in runner.map(lambda p: p["x"] * 3, params)] == [3, 6]
        assert [r.value for r in runner.map("json:dumps", params)] == ['{"x": 1}', '{"x": 2}']  # module ref
        assert [r.value["x"] for r in runner.map(ref("echo"), params)] == [1, 2]  # file ref
        from runner_trials import echo  # importable by reference: the test folder is on sys.path

        assert [r.value["x"] for r in runner.map(echo, params)] == [1, 2]


# -- faults ----------------------------------------------------------------------------------------

FAULT_KINDS = ["ok", "raise", "segv", "sigkill", "hang", "alloc", "not_json", "memory_error", "exit", "ok"]
EXPECTED = {
    "ok": "ok",
    "raise": "exception",
    "segv": "crashed",
    "sigkill": "crashed",
    "hang": "timeout",
    "alloc": "killed_memory",
    "not_json": "not_serializable",
    "memory_error": "framework_oom",
    "exit": "crashed",
}
WORKER_REASON = {
    "segv": "crashed",
    "sigkill": "crashed",
    "hang": "killed_timeout",
    "alloc": "killed_memory",
    "exit": "crashed",
}


@pytest.mark.slow
@TIERS
def test_each_fault_ends_its_trial_with_the_right_cause_and_the_run_goes_on(tmp_path, tier):
    policy = Policy(memory_limit="250MB", timeout="1.5s", peak_ratio=None)
    params = [{"kind": k} for k in FAULT_KINDS]
    with Runner(policy=policy, store=tmp_path / "f.db", tree_tracking=tier) as runner:
        results = runner.map(ref("fault"), params, name="faults")
        store = runner.store
        run = store.get_run("faults")
        attempts = store.attempts(run.run_id)
        workers = store.workers(run.run_id)
    assert [r.index for r in results] == list(range(len(FAULT_KINDS)))
    for kind, result in zip(FAULT_KINDS, results, strict=True):
        expected = EXPECTED[kind]
        assert result.status == ("ok" if expected == "ok" else "failed"), kind
        if expected != "ok":
            assert result.error.status == expected, (kind, result.error)
            assert result.attempts == 1
    by_kind = dict(zip(FAULT_KINDS, results, strict=False))
    assert "boom from the trial" in by_kind["raise"].error.message
    assert "RuntimeError" in by_kind["raise"].error.traceback
    assert by_kind["segv"].error.signal == "SIGSEGV"
    assert by_kind["sigkill"].error.signal == "SIGKILL"
    # killed at its timeout (how soon after it, a bench measures): it ran the full 1.5 s
    assert by_kind["hang"].error.detail["timeout_s"] == 1.5 and by_kind["hang"].duration_s >= 1.5
    alloc = by_kind["alloc"].error
    assert alloc.limit_bytes == 250_000_000 and (alloc.rss_bytes or 0) > 250_000_000
    assert "JSON" in by_kind["not_json"].error.message
    assert by_kind["memory_error"].error.framework == "python"
    assert results[-1].status == "ok"
    # the store holds one finished attempt per trial with the same cause, and why each worker ended
    assert [a.status for a in sorted(attempts, key=lambda a: a.index)] == [EXPECTED[k] for k in FAULT_KINDS]
    ended = {}
    for a in attempts:
        ended.setdefault(a.worker_id, []).append(FAULT_KINDS[a.index])
    reasons = {w.worker_id: w.reason for w in workers}
    for worker_id, kinds in ended.items():
        last = kinds[-1]
        if last in WORKER_REASON:
            assert reasons[worker_id] == WORKER_REASON[last], (last, reasons[worker_id])
    assert reasons[max(reasons)] == "shutdown"
    assert all(w.reason for w in workers)
    killed = next(w for w in workers if w.reason == "killed_memory")
    assert killed.detail["limit_bytes"] == 250_000_000 and "memory_limit" in killed.detail["message"]


def test_retries_follow_the_policy(tmp_path):
    marker = tmp_path / "marker"
    policy = Policy(retries=2, retry_on=("crash",), peak_ratio=None)
    params = [{"kind": "segv"}, {"kind": "raise"}, {"kind": "ok"}]
    with Runner(policy=policy, store=tmp_path / "r.db") as runner:
        segv, raised, ok = runner.map(ref("fault"), params, name="retries")
        (flaky,) = runner.map(ref("flaky"), [{"marker": str(marker)}], name="flaky")
        attempts = runner.store.attempts(runner.store.get_run("retries").run_id)
    assert (segv.status, segv.attempts) == ("failed", 3)  # 1 + 2 retries, all crashed
    assert (raised.status, raised.attempts) == ("failed", 1)  # exceptions are not in retry_on
    assert ok.attempts == 1
    assert [a.status for a in attempts if a.index == 0] == ["crashed"] * 3
    assert (flaky.status, flaky.attempts) == ("ok", 2)

    policy = Policy(retries=1, retry_on=("exception",), peak_ratio=None)
    with Runner(policy=policy, store=None) as runner:
        (raised,) = runner.map(ref("fault"), [{"kind": "raise"}])
    assert raised.attempts == 2


@TIERS
def test_on_error_stop_stops_and_resumes(tmp_path, tier):
    db = tmp_path / "s.db"
    params = [{"kind": "ok"}, {"kind": "raise"}] + [{"kind": "ok"}] * 4
    with Runner(policy=Policy(on_error="stop"), store=db, tree_tracking=tier) as runner:
        with pytest.raises(TrialError, match="on_error='stop'") as info:
            runner.map(ref("fault"), params, name="stopper")
    done = {r.index: r.status for r in info.value.results}
    assert done[0] == "ok" and done[1] == "failed" and len(done) < len(params)
    with Runner(
        store=db, tree_tracking=tier
    ) as runner:  # on_error=continue: the rest runs, nothing done twice
        results = runner.map(ref("fault"), params, name="stopper")
        attempts = runner.store.attempts(runner.store.get_run("stopper").run_id)
    assert [r.status for r in results] == ["ok", "failed", "ok", "ok", "ok", "ok"]
    finished = [a.index for a in attempts if a.status in ("ok", "exception")]
    assert sorted(finished) == list(range(6))
    # the function raised: no other cause to chain
    assert info.value.status == "exception" and info.value.__cause__ is None


@pytest.mark.parametrize(
    ("kind", "policy", "status", "cause"),
    [
        ("hang", {"timeout": "1s"}, "timeout", TrialTimeoutError),
        ("alloc", {"memory_limit": "300MB"}, "killed_memory", MemoryLimitError),
        ("sigkill", {}, "crashed", WorkerCrashedError),
        ("memory_error", {}, "framework_oom", FrameworkOOMError),
    ],
)
def test_on_error_stop_chains_the_error_of_what_ended_the_trial(kind, policy, status, cause):
    with Runner(policy=Policy(on_error="stop", **policy), store=None) as runner:
        with pytest.raises(TrialError, match="on_error='stop'") as info:
            runner.map(ref("fault"), [{"kind": kind}])
    assert info.value.status == status and info.value.index == 0
    assert type(info.value.__cause__) is cause and info.value.__cause__.status == status


# -- recycling -------------------------------------------------------------------------------------


def test_predictive_recycling_acts_before_the_memory_limit(tmp_path):
    # each trial keeps 30 MiB alive in its worker; the limit would be crossed at the ~7th trial
    policy = Policy(memory_limit="240MiB", peak_ratio=None)
    with Runner(policy=policy, store=tmp_path / "r.db") as runner:
        results = runner.map(ref("leak"), [{"mb": 30}] * 12, name="leaky")
        workers = runner.store.workers(runner.store.get_run("leaky").run_id)
    assert all(r.status == "ok" for r in results)  # nobody was killed
    recycled = [w for w in workers if w.reason == "recycled"]
    assert recycled and all(w.detail["rule"] == "predictive_limit" for w in recycled)
    assert all(r.peak_rss_bytes < 240 * 2**20 for r in results)
    assert recycled[0].detail["growth_per_trial_bytes"] == pytest.approx(30 * 2**20, rel=0.2)


def test_recycles_kills_and_retries_are_events_that_show_lists(tmp_path, capsys):
    from trainguard.cli import main

    db = tmp_path / "r.db"
    policy = Policy(
        max_trials_per_worker=2, memory_limit="250MB", retries=1, retry_on=("memory",), peak_ratio=None
    )
    params = [{"kind": "ok"}, {"kind": "ok"}, {"kind": "alloc"}, {"kind": "ok"}]
    with Runner(policy=policy, store=db) as runner:
        results = runner.map(ref("fault"), params, name="eventful")
        events = runner.store.events(runner.store.get_run("eventful").run_id)
    assert [r.status for r in results] == ["ok", "ok", "failed", "ok"]
    assert results[2].attempts == 2
    by_kind: dict[str, list] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    (recycle,) = by_kind["recycle"]
    assert recycle.worker_id == 0 and recycle.data["rule"] == "max_trials" and recycle.data["trials"] == 2
    assert (
        "worker 0 recycled after 2 trials" in recycle.message and "max_trials_per_worker=2" in recycle.message
    )
    kills = by_kind["kill"]
    assert [(k.worker_id, k.index) for k in kills] == [(1, 2), (2, 2)]  # the first try and its retry
    assert all(k.data["status"] == "killed_memory" and k.data["value"] > k.data["limit"] for k in kills)
    assert kills[0].message.startswith("worker 1 (trial 2 attempt 1) killed at memory_limit: tree RSS")
    (retry,) = by_kind["retry"]
    assert retry.index == 2 and retry.worker_id == 1 and retry.data["status"] == "killed_memory"
    assert "ended with killed_memory (killed at memory_limit" in retry.message
    assert "retrying as attempt 2" in retry.message

    assert main(["show", "eventful", "--store", str(db), "--events", "20"]) == 0
    out = capsys.readouterr().out
    recent = out[out.index("recent events") :]
    for needle in (
        "recycle",
        "worker 0 recycled after 2 trials",
        "kill",
        "worker 1 (trial 2 attempt 1) killed at memory_limit",
    ):
        assert needle in recent, needle
    assert "trial 2 attempt 1 on worker 1 ended with killed_memory" in recent


# -- worker environment ----------------------------------------------------------------------------


def test_worker_environment_is_set_before_any_import(tmp_path):
    names = [
        "OMP_NUM_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "KERAS_BACKEND",
        "CUDA_VISIBLE_DEVICES",
        "MALLOC_TRIM_THRESHOLD_",
        "EXTRA",
    ]
    runner = Runner(
        workers=2,
        store=None,
        threads=3,
        keras_backend="torch",
        gpus=["7", "8"],
        malloc_trim_threshold="128KiB",
        env={"EXTRA": "yes"},
        preload=("numpy",),
    )
    with runner:
        results = runner.map(ref("env"), [{"names": names, "sleep_s": 0.5}] * 4)
    envs = [r.value["env"] for r in results]
    assert {e["OMP_NUM_THREADS"] for e in envs} == {"3"} and {e["TF_NUM_INTRAOP_THREADS"] for e in envs} == {
        "3"
    }
    assert {e["KERAS_BACKEND"] for e in envs} == {"torch"}
    assert {e["CUDA_VISIBLE_DEVICES"] for e in envs} == {"7", "8"}  # one device per worker slot
    assert {e["MALLOC_TRIM_THRESHOLD_"] for e in envs} == {str(128 * 1024)}
    assert {e["EXTRA"] for e in envs} == {"yes"}
    assert all(r.value["modules"] == ["numpy"] for r in results)  # preloaded numpy, no framework


def test_allocator_library_is_preloaded_in_the_workers():
    import glob

    libs = sorted(glob.glob("/lib/x86_64-linux-gnu/libm.so.6") + glob.glob("/usr/lib*/libm.so.6"))
    if not libs:
        pytest.skip("no libm.so.6 to stand in for an allocator library")
    with Runner(store=None, allocator=libs[0]) as runner:
        (r,) = runner.map(ref("env"), [{"names": ["LD_PRELOAD"]}])
    assert r.value["env"]["LD_PRELOAD"].split(":")[0] == str(Path(libs[0]).resolve())


def test_framework_start_up_lines_are_dropped_and_real_errors_kept(monkeypatch, capfd):
    from trainguard import frameworks

    # a stand-in module prints TensorFlow 2.21's start-up lines on import (real TF: tests/frameworks)
    monkeypatch.setattr(frameworks, "QUIET_MODULES", ("runner_noisy",))
    with Runner(store=None, env={"TF_CPP_MIN_LOG_LEVEL": "1"}) as runner:
        (ok,) = runner.map(ref("import_noisy"), [{}])
    err = capfd.readouterr().err
    assert ok.status == "ok"
    assert "absl::InitializeLog" not in err and "oneDNN" not in err
    assert "a real warning from the import" in err and "trial says: a real error line" in err

    # a worker that dies in the middle of the import: the supervisor shows what it captured
    with Runner(store=None, env={"TF_CPP_MIN_LOG_LEVEL": "1", "RUNNER_NOISY_CRASH": "1"}) as runner:
        (crashed,) = runner.map(ref("import_noisy"), [{}])
    err = capfd.readouterr().err
    assert crashed.error.status == "crashed" and crashed.error.signal == "SIGSEGV"
    assert "Check failed: the fatal line" in err and "a real warning from the import" in err
    assert "oneDNN" not in err

    with Runner(store=None, env={"TF_CPP_MIN_LOG_LEVEL": "0"}) as runner:  # asked for everything
        runner.map(ref("import_noisy"), [{}])
    assert "oneDNN custom operations are on" in capfd.readouterr().err


def test_default_threads_are_cores_divided_by_workers(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    with Runner(workers=2, store=None) as runner:
        (r,) = runner.map(ref("env"), [{"names": ["OMP_NUM_THREADS"]}])
    assert r.value["env"]["OMP_NUM_THREADS"] == str(max(1, cores // 2))


def test_workers_die_with_the_supervisor_thread_exits_cleanly(tmp_path):
    # a runner driven from a non-main thread (no PDEATHSIG there) still shuts its workers down
    out = {}

    def drive():
        with Runner(store=None) as runner:
            out["results"] = runner.map(ref("echo"), [{"x": 1}])

    t = threading.Thread(target=drive)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the runner's thread did not end"
    pid = out["results"][0].value["pid"]
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, f"worker {pid} to end and be reaped")


@TIERS
@pytest.mark.parametrize("crash", [False, True])
def test_a_workers_children_do_not_outlive_it(tmp_path, crash, tier):
    pid_file = tmp_path / "child.pid"
    with Runner(store=None, tree_tracking=tier) as runner:
        (r,) = runner.map(ref("spawn_child"), [{"pid_file": str(pid_file), "crash": crash}])
    assert r.status == ("failed" if crash else "ok")
    child = int(pid_file.read_text())
    wait_gone([child], 60, f"the worker's child {child} to end")


# -- file descriptors shared by the loop and the sampler thread -------------------------------------


def test_closing_a_pipe_pair_never_closes_a_reused_fd_number():
    from trainguard.runner._protocol import PipePair

    pipes = PipePair(1 << 20)
    child_fds = {pipes.child_read_fd, pipes.child_write_fd}
    pipes.close_child_ends()  # as right after the worker is spawned
    # the kernel hands out the lowest free numbers: take fds until the child's old numbers are reused,
    # as another worker's pipe or the sampler's /proc reads would be
    held: list[int] = []
    while not child_fds <= set(held) and len(held) < 1000:
        held.append(os.open("/dev/null", os.O_RDONLY))
    try:
        assert child_fds <= set(held)
        pipes.close()
        for fd in held:
            os.fstat(fd)  # EBADF if close() closed a number it no longer owned
    finally:
        for fd in held:
            os.close(fd)


def test_many_short_recycled_workers_sampled_fast_share_fds_safely(tmp_path, caplog):
    # every trial starts and ends a worker (pipes and /proc fds opened and closed) while the sampler
    # thread reads every millisecond: a double close used to hit the other thread's fds within ~30 trials
    caplog.set_level("WARNING", logger="trainguard")
    policy = Policy(max_trials_per_worker=1, peak_ratio=None)
    with Runner(workers=3, policy=policy, store=tmp_path / "r.db", sample_interval="1ms") as runner:
        results = runner.map(ref("echo"), [{"x": i} for i in range(30)], name="churn")
    assert [r.status for r in results] == ["ok"] * 30
    assert len({r.value["pid"] for r in results}) == 30
    assert not [r for r in caplog.records if r.levelno >= 30], [r.getMessage() for r in caplog.records]


def test_a_failing_memory_reading_is_logged_and_skipped_not_fatal(tmp_path, caplog, monkeypatch):
    from trainguard import process as proctree

    real_read = proctree.ProcessTree.read
    calls = {"n": 0}

    def flaky_read(self, **kwargs):
        calls["n"] += 1
        if calls["n"] % 3 == 0:  # the loop's end-of-trial readings and the sampler thread's both fail
            raise OSError(9, "Bad file descriptor")
        return real_read(self, **kwargs)

    monkeypatch.setattr(proctree.ProcessTree, "read", flaky_read)
    caplog.set_level("ERROR", logger="trainguard")
    with Runner(workers=2, store=tmp_path / "r.db", sample_interval="5ms") as runner:
        results = runner.map(ref("echo"), [{"x": i, "sleep_s": 0.02} for i in range(8)], name="flaky-reads")
    assert [r.status for r in results] == ["ok"] * 8
    assert any("reading skipped" in r.getMessage() for r in caplog.records)


def test_no_memory_reading_is_stored_for_a_worker_that_is_not_running(tmp_path):
    # the worker exits but stays unreaped for 0.3 s (its pipe held open elsewhere) while sampled every
    # 2 ms: its /proc statm reads all zeros then, which used to be stored as RSS 0 readings
    params = [{"kind": "ok"}, {"linger_s": 0.3}, {"kind": "ok"}]
    fns = [ref("fault"), ref("exit_unreaped"), ref("fault")]
    with Runner(store=tmp_path / "r.db", sample_interval="2ms") as runner:
        results = [
            runner.map(fn, [p], name=f"t{i}")[0] for i, (fn, p) in enumerate(zip(fns, params, strict=True))
        ]
        samples = runner.store.samples(runner.store.get_run("t1").run_id)
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert results[1].error.status == "crashed"
    assert samples and [s for s in samples if s.rss_bytes == 0] == []


# -- resume ----------------------------------------------------------------------------------------


@TIERS
def test_same_call_resumes_from_the_store(tmp_path, tier):
    db = tmp_path / "r.db"
    params = [{"x": i} for i in range(4)]
    with Runner(store=db, tree_tracking=tier) as runner:
        first = runner.map(ref("echo"), params)
    with Runner(store=db, tree_tracking=tier) as runner:
        again = runner.map(ref("echo"), params)  # same fn and params: same default name
        runs = runner.store.list_runs()
        attempts = runner.store.attempts(runs[0].run_id)
    assert [r.value for r in again] == [r.value for r in first]
    assert len(runs) == 1 and runs[0].name.startswith("echo-")
    assert len(attempts) == 4  # nothing ran twice


# -- bad input: one line, before any trial, nothing stored is lost ---------------------------------


def test_bad_arguments_fail_before_any_worker(tmp_path):
    with pytest.raises(ConfigError, match="workers=0"):
        Runner(workers=0)
    with pytest.raises(ConfigError, match="keras_backend='theano'"):
        Runner(keras_backend="theano")
    with pytest.raises(ConfigError, match="does not exist"):
        Runner(allocator="/nonexistent/libjemalloc.so.2")
    for name in ("jemalloc", "tcmalloc"):
        try:
            find_allocator(name)
        except ConfigError as err:  # absent here: the error says what to install
            assert "is not installed" in str(err) and "apt-get install" in str(err)
    with pytest.raises(ConfigError, match="allocator='ptmalloc9'"):
        Runner(allocator="ptmalloc9")
    with pytest.raises(UnitError, match="4 potatoes"):
        Runner(policy=Policy(memory_limit="4 potatoes"))
    with pytest.raises(ConfigError, match="preload module"):
        Runner(preload=("no_such_module_xyz",))


@pytest.mark.parametrize(
    "fn, params, needle",
    [
        (ref("echo"), {"x": 1}, "list of dicts"),
        (ref("echo"), "[{}]", "list of dicts"),
        (ref("echo"), [1, 2], "params[0] is a int"),
        (ref("echo"), [{"x": object()}], "params[0]"),
        (ref("echo"), [{1: 2}], "non-string key"),
        ("no_such_package_xyz.mod:fn", [{}], "cannot be found"),
        (str(HERE / "missing.py") + ":fn", [{}], "does not exist"),
        (ref("no_such_function"), [{}], "defines no top-level 'no_such_function'"),
        ("not a reference", [{}], "not a reference"),
        (42, [{}], "fn must be a callable"),
        (_closure_factory(threading.Lock()), [{}], "cannot be pickled"),
    ],
)
def test_bad_fn_or_params_is_one_line_before_anything_runs(tmp_path, fn, params, needle):
    db = tmp_path / "r.db"
    with Runner(store=db) as runner:
        runner.map(ref("echo"), [{"x": 1}], name="kept")
        with pytest.raises(ConfigError) as info:
            runner.map(fn, params, name="bad")
        assert needle in str(info.value) and "\n" not in str(info.value)
        assert [r.name for r in runner.store.list_runs()] == ["kept"]
    with Store(db, readonly=True) as store:
        (trial,) = store.trials(store.get_run("kept").run_id)
        assert trial.status == "ok"


def test_syntax_error_in_fn_file_names_the_line(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def train(p):\n    return (\n")
    with pytest.raises(ConfigError, match=r"does not parse: line \d+"):
        Runner(store=None).map(f"{bad}:train", [{}])


def test_fn_that_fails_to_import_in_the_worker_is_one_line(tmp_path):
    with Runner(store=tmp_path / "r.db") as runner:
        with pytest.raises(ConfigError, match="cannot be loaded in the worker: ModuleNotFoundError") as info:
            runner.map(str(HERE / "runner_bad_import.py") + ":train", [{}], name="bad-import")
        assert "\n" not in str(info.value)
        (trial,) = runner.store.trials(runner.store.get_run("bad-import").run_id)
        assert trial.status == "pending" and trial.attempts == 0  # no trial started


def test_top_level_import_stays_light():
    import subprocess
    import sys

    code = "import trainguard, trainguard.runner, trainguard.cli.run, sys; print(sorted(m for m in ('torch','tensorflow','keras','jax','numpy','scipy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []


def test_trainguard_exports_runner_names():
    assert trainguard.Runner is Runner and trainguard.Policy is Policy
    assert trainguard.TrialResult is trainguard.runner.TrialResult
