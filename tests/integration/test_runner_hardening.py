"""The runner against what a first day of real use broke: recursive runners, two supervisors on
one run, daemonized children, signals to the supervisor, planted symlinks, bytes written onto the
worker's channel, huge results. Real workers, real SQLite files, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _waits import signals_as_in_a_terminal
from trainguard.exceptions import ConfigError, RunLockedError
from trainguard.runner import Policy, Runner
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = str(HERE / "hardening_trials.py")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def ref(name: str) -> str:
    return f"{TRIALS}:{name}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _pid_from(path: Path, timeout_s: float = 30) -> int:
    assert _wait_for(lambda: path.exists() and path.read_text().strip(), timeout_s), f"{path} never written"
    return int(path.read_text())


# -- 1. no recursive runners ---------------------------------------------------------------------


def test_a_module_level_runner_fails_at_once_with_the_guard_to_add_and_leaves_no_process(tmp_path):
    pids = tmp_path / "imports"
    pids.mkdir()
    train = tmp_path / "train.py"
    train.write_text(
        textwrap.dedent(
            f"""
            import os, pathlib
            import trainguard
            pathlib.Path({str(pids)!r}, str(os.getpid())).touch()   # every import, every process

            def train(params):
                return params["x"] * 2

            with trainguard.Runner(workers=2, store={str(tmp_path / "inner.db")!r}) as runner:
                runner.map(train, [{{"x": i}} for i in range(4)])
            """
        )
    )
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"x": 1}, {"x": 2}]))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "run",
            f"{train}:train",
            "--params",
            str(grid),
            "--store",
            str(tmp_path / "r.db"),
            "--name",
            "nested",
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=_env(),
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert 'if __name__ == "__main__":' in lines[0] and "train.py" in lines[0], lines[0]
    imported_in = [int(p.name) for p in pids.iterdir()]
    assert 1 <= len(imported_in) <= 2  # the supervisor never imports the file; each worker once
    assert not (tmp_path / "inner.db").exists()
    assert _wait_for(lambda: not any(_alive(p) for p in imported_in), 10), imported_in
    with Store(tmp_path / "r.db", readonly=True) as store:
        run = store.get_run("nested")
        assert run.status == "failed"
        ends = [e for e in store.events(run.run_id) if e.kind == "run_finished"]
        assert 'if __name__ == "__main__":' in ends[-1].message


def test_a_runner_or_leakcheck_inside_a_trial_is_refused(tmp_path):
    import trainguard

    def nested(params):
        import trainguard as tg

        kind = params["kind"]
        try:
            if kind == "runner":
                tg.Runner(store=None)
            else:
                tg.leakcheck(lambda: None, max_iterations=5)
        except ConfigError as err:
            return str(err)
        return "not refused"

    with Runner(store=None) as runner:
        results = runner.map(nested, [{"kind": "runner"}, {"kind": "leakcheck"}])
    assert [r.status for r in results] == ["ok", "ok"]
    for r in results:
        assert "cannot start inside a trainguard worker" in r.value and "__main__" in r.value
    trainguard.Runner(store=None).close()  # outside a worker, nothing is refused


def test_a_module_level_leakcheck_is_refused_in_the_leak_check_process(tmp_path):
    target = tmp_path / "steps.py"
    target.write_text(
        "import trainguard\n\ndef step():\n    pass\n\ntrainguard.leakcheck(step, max_iterations=5)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "trainguard", "leakcheck", f"{target}:step", "--max-iterations", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=_env(),
    )
    assert proc.returncode == 2, proc.stderr
    assert 'if __name__ == "__main__":' in proc.stderr and "steps.py" in proc.stderr, proc.stderr


# -- 2. one run, one supervisor ------------------------------------------------------------------

_SUPERVISOR = textwrap.dedent(
    """
    import json, sys
    from trainguard.exceptions import RunLockedError
    from trainguard.runner import Runner
    store, fn, count, n, sleep_s = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    gate = sys.argv[6] if len(sys.argv) > 6 else None
    params = [{"i": i, "count_file": count, "sleep_s": sleep_s, "gate": gate} for i in range(n)]
    try:
        with Runner(workers=2, store=store) as runner:
            results = runner.map(fn, params, name="shared")
    except RunLockedError as err:
        print(str(err), file=sys.stderr)
        sys.exit(75)
    except KeyboardInterrupt:
        sys.exit(130)
    print(json.dumps([r.status for r in results]))
    """
)


def _supervisor(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "supervisor.py"
    script.write_text(_SUPERVISOR)
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def test_two_supervisors_on_one_run_each_trial_runs_once_and_the_second_is_refused(tmp_path):
    count, gate = tmp_path / "count.txt", tmp_path / "gate"
    # the first supervisor's trials wait at the gate until the second has been answered: it holds
    # the run's lock however long the second takes to start (a fixed sleep lost that race under load)
    args = (str(tmp_path / "r.db"), ref("counted"), str(count), "6", "0.0", str(gate))
    first = _supervisor(tmp_path, *args)
    try:
        assert _wait_for(lambda: count.exists() and count.read_text(), 60)
        second = _supervisor(tmp_path, *args)
        out2, err2 = second.communicate(timeout=120)
    finally:
        gate.touch()
    out1, err1 = first.communicate(timeout=120)
    assert first.returncode == 0, err1
    assert json.loads(out1) == ["ok"] * 6
    assert second.returncode == 75, err2
    message = err2.strip()
    assert "\n" not in message
    assert f"pid {first.pid} on host" in message and "since" in message and "'shared'" in message
    executions = [int(line.split()[0]) for line in count.read_text().splitlines()]
    assert sorted(executions) == list(range(6))  # each trial executed exactly once


def test_the_lock_of_a_killed_supervisor_is_taken_over(tmp_path):
    count = tmp_path / "count.txt"
    args = (str(tmp_path / "r.db"), ref("counted"), str(count), "4", "1.0")
    first = _supervisor(tmp_path, *args)
    assert _wait_for(lambda: count.exists() and count.read_text(), 60)
    first.kill()
    first.communicate(timeout=30)
    second = _supervisor(tmp_path, *args)
    out2, err2 = second.communicate(timeout=120)
    assert second.returncode == 0, err2
    assert json.loads(out2) == ["ok"] * 4
    assert f"pid {first.pid}" in err2  # it says whose lock it took over
    assert not Path(str(tmp_path / "r.db") + ".locks").exists()  # released, nothing left behind


def test_a_second_runner_in_the_same_process_is_refused_too(tmp_path):
    store = tmp_path / "r.db"
    with Store(store) as s:
        lock = s.lock_run("shared")
        try:
            with Runner(store=store) as runner, pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
                runner.map(ref("echo"), [{"x": 1}], name="shared")
        finally:
            lock.release()
        with Runner(store=store) as runner:
            assert runner.map(ref("echo"), [{"x": 1}], name="shared")[0].ok


# -- 3. nothing a trial starts outlives it -------------------------------------------------------


@pytest.mark.parametrize("tracking", ["auto", "subreaper"])
def test_a_daemonized_child_counts_in_the_tree_and_is_killed_with_its_trial(tmp_path, tracking):
    pid_file = tmp_path / "daemon.pid"
    policy = Policy(memory_limit="300MB", peak_ratio=None)
    with Runner(store=tmp_path / "r.db", policy=policy, tree_tracking=tracking) as runner:
        [result] = runner.map(
            ref("daemon_allocates"), [{"mb": 600, "pid_file": str(pid_file), "sleep_s": 60}], name="daemon"
        )
        daemon = _pid_from(pid_file, 5)
    assert result.status == "failed" and result.error.status == "killed_memory", result.error
    assert result.peak_rss_bytes > 300e6
    assert _wait_for(lambda: not _alive(daemon), 5)


_SIGNALLED = textwrap.dedent(
    """
    import faulthandler, signal, sys
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it is, should it hang
    from trainguard.runner import Runner
    store, fn, pid_file, tracking = sys.argv[1:5]
    try:
        with Runner(store=store, tree_tracking=tracking) as runner:
            runner.map(fn, [{"pid_file": pid_file}], name="signalled")
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


@pytest.mark.parametrize(
    ("sig", "tracking"),
    [
        (signal.SIGTERM, "auto"),
        (signal.SIGHUP, "subreaper"),
        (signal.SIGKILL, "auto"),
        (signal.SIGKILL, "subreaper"),
    ],
)
def test_nothing_a_trial_started_outlives_a_signalled_supervisor(tmp_path, sig, tracking):
    script = tmp_path / "signalled.py"
    script.write_text(_SIGNALLED)
    pid_file = tmp_path / "daemon.pid"
    store = tmp_path / "r.db"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(store), ref("daemon_sleeps"), str(pid_file), tracking],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        # the signals at their default action, as in a terminal: under nohup (as CI may run) SIGHUP
        # is inherited ignored, and a session rightly leaves an ignored signal ignored
        preexec_fn=signals_as_in_a_terminal,
    )
    daemon = _pid_from(pid_file, 60)
    with Store(store, readonly=True) as s:
        [worker] = s.workers(s.get_run("signalled").run_id)
    assert _alive(daemon) and _alive(worker.pid)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # every thread's stack, then the end
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        pytest.fail(f"the supervisor did not end within 60 s of {sig.name}; its threads:\n{err[-8000:]}")
    assert _wait_for(lambda: not _alive(daemon) and not _alive(worker.pid), 10), (daemon, worker.pid)
    if sig == signal.SIGKILL:
        return
    assert proc.returncode == 130, err
    with Store(store, readonly=True) as s:
        assert s.get_run("signalled").status == "interrupted"


# -- 5. no predictable temporary files -----------------------------------------------------------


def test_captured_stderr_is_never_read_or_written_through_a_planted_symlink(tmp_path):
    from trainguard.frameworks import _quiet

    secret = tmp_path / "secret.txt"
    secret.write_text("root-only contents\n")
    folder = tmp_path / "capture"
    folder.mkdir(mode=0o700)
    planted = Path(_quiet.capture_path(4242, str(folder)))
    planted.symlink_to(secret)
    read_fd, write_fd = os.pipe()
    _quiet.replay_capture(4242, capture_dir=str(folder), out_fd=write_fd, level=1)
    os.close(write_fd)
    assert os.read(read_fd, 1000) == b""
    os.close(read_fd)
    assert planted.is_symlink()  # neither followed nor removed
    # writing: a planted link at the capture path is not written through
    own = Path(_quiet.capture_path(os.getpid(), str(folder)))
    own.symlink_to(secret)
    with _quiet._stderr_to_file(1, str(folder)):
        os.write(2, b"I0000 00:00:1.0 1 x.cc:1] noise\n")
    assert secret.read_text() == "root-only contents\n"


def test_a_run_keeps_its_temporary_files_in_a_private_folder_it_removes(tmp_path, monkeypatch):
    import tempfile

    seen = []
    real = tempfile.mkdtemp

    def spy(*args, **kwargs):
        path = real(*args, **kwargs)
        seen.append((path, os.stat(path).st_mode & 0o777))
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    with Runner(store=tmp_path / "r.db") as runner:
        assert runner.map(ref("echo"), [{"x": 1}], name="tmp")[0].ok
    [(path, mode)] = [(p, m) for p, m in seen if "trainguard-run-" in p]
    assert mode == 0o700 and not os.path.exists(path)


# -- 6. the worker pipe carries data, not code ---------------------------------------------------


def test_bytes_a_trial_writes_onto_the_channel_fail_that_trial_and_the_run_goes_on(tmp_path):
    marker = tmp_path / "pwned"
    params = [
        {"kind": "garbage"},
        {"kind": "pickle", "marker": str(marker)},
        {"kind": "huge_header"},
    ]
    with Runner(store=tmp_path / "r.db") as runner:
        bad = runner.map(ref("write_garbage"), params, name="garbage")
        good = runner.map(ref("echo"), [{"x": i} for i in range(3)], name="after")
    assert not marker.exists()  # the pickle was never unpickled
    assert [r.status for r in bad] == ["failed"] * 3
    for r in bad:
        assert r.error.status == "protocol_error"
        assert "message channel" in r.error.message
    assert "not JSON" in bad[0].error.message and "not JSON" in bad[1].error.message
    assert "over the cap" in bad[2].error.message
    assert [r.status for r in good] == ["ok"] * 3


# -- 7. input edges ------------------------------------------------------------------------------


def test_a_result_over_the_cap_fails_that_trial_with_its_size(tmp_path):
    with Runner(store=tmp_path / "r.db", max_result_bytes="1MiB") as runner:
        results = runner.map(ref("big_result"), [{"n": 5_000_000}, {"n": 10}], name="big")
    assert results[1].ok and results[1].value == "x" * 10
    r = results[0]
    assert r.status == "failed" and r.error.status == "result_too_large"
    assert "5000002 bytes" in r.error.message and "max_result_bytes=1048576" in r.error.message
    with Store(tmp_path / "r.db", readonly=True) as s:
        [stored] = [t for t in s.trials(s.get_run("big").run_id) if t.index == 0]
        assert stored.value is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_result_bytes": "lots"}, "max_result_bytes"),
        ({"max_result_bytes": 0}, "between 1 byte"),
        ({"tree_tracking": "jail"}, "tree_tracking"),
    ],
)
def test_bad_runner_hardening_arguments_are_one_line_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        Runner(store=None, **kwargs)
    assert "\n" not in str(info.value)


def test_finishing_an_attempt_that_never_started_says_so(tmp_path):
    with Store(tmp_path / "r.db") as s:
        run = s.begin_run("r", "f", [{"a": 1}], {})
        with pytest.raises(ConfigError, match="never started: call start_attempt"):
            s.finish_attempt(run.run_id, 0, 1, status="ok", error=None, peak_rss_bytes=None, duration_s=0.1)
        assert s.finish_attempt(
            run.run_id, 0, 1, status="ok", error=None, peak_rss_bytes=None, duration_s=0.1, worker_id=3
        )
        [attempt] = s.attempts(run.run_id)
        assert (attempt.worker_id, attempt.status) == (3, "ok")


def test_the_cgroups_a_killed_supervisor_left_are_removed_by_the_next_one(tmp_path):
    from trainguard.process import TreeCgroup

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = TreeCgroup.create(f"trainguard-{dead.pid}-w0-test")
    if stale is None:
        pytest.skip("no cgroup v2 can be made on this machine (the subreaper alone is used)")
    import trainguard.process.cgroup as proctree

    proctree._SWEPT.clear()  # this test process may have swept already
    with Runner(store=tmp_path / "r.db") as runner:
        assert runner.map(ref("echo"), [{"x": 1}], name="sweep")[0].ok
    assert not os.path.exists(stale.path)
