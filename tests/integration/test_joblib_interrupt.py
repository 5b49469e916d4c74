"""Ctrl-C in a caller running many tasks: the joblib backend's Parallel, Runner.map and
``trainguard run`` each stop, end every worker, and leave the store saying what was stopped.

Each case runs ``interrupt_tasks.py`` (120 one-second tasks, two workers, each task leaving a
marker file named after the pid that ran it) in a child process, sends SIGINT once tasks run, and
then reads the markers, the child's exit and the store. How soon the caller ends is measured in
``bench/joblib_interrupt.py``, not here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("joblib")
sys.path.insert(0, os.path.dirname(__file__))

from _waits import signals_as_in_a_terminal, wait_for, wait_gone  # noqa: E402
from trainguard.store import Store  # noqa: E402

HERE = Path(__file__).parent
TASKS = HERE / "interrupt_tasks.py"
TOTAL = 120


def _interrupt(how: str, folder: Path) -> tuple[subprocess.CompletedProcess[str], list[int], Path]:
    """Run the case ``how`` ("joblib", "runner" or "cli") until two tasks have started, send it
    SIGINT, and return its exit, the pids that ran tasks, and its store."""
    markers, store = folder / "markers", folder / "runs.db"
    markers.mkdir()
    if how == "cli":
        params = folder / "params.json"
        params.write_text(json.dumps([{"i": i, "dir": str(markers)} for i in range(TOTAL)]))
        argv = [sys.executable, "-m", "trainguard", "run", f"{TASKS}:trial", "--params", str(params)]
        argv += ["--store", str(store), "--name", "interrupt", "--no-progress"]
    else:
        argv = [sys.executable, str(TASKS), how, str(markers), str(store), str(TOTAL)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=signals_as_in_a_terminal
    )
    try:
        wait_for(lambda: len(list(markers.iterdir())) >= 2, 180, "two tasks to start")
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)  # a backstop: it ends within a second
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the {how} case still ran 120 s after SIGINT; its output:\n{out[-2000:]}\n{err[-4000:]}")
    ran = [int(p.name.split("-")[1]) for p in markers.iterdir()]
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), ran, store


def _every_worker(store: Path) -> list[int]:
    with Store(store, readonly=True) as s:
        return [w.pid for run in s.list_runs() for w in s.workers(run.run_id) if w.pid]


def _stopped_in_few_tasks_with_no_worker_left(ran: list[int], store: Path) -> None:
    # each task is one second: a Ctrl-C that did not stop the work lets all 120 run
    assert len(ran) < TOTAL // 2, f"{len(ran)} of {TOTAL} tasks ran after the Ctrl-C"
    workers = set(ran) | set(_every_worker(store))
    assert workers and os.getpid() not in workers
    wait_gone(workers, 30, "every worker process to end after the Ctrl-C")


@pytest.fixture(scope="module")
def joblib_interrupted(tmp_path_factory):
    return _interrupt("joblib", tmp_path_factory.mktemp("joblib-interrupt"))


def test_ctrl_c_ends_a_joblib_parallel_call_with_keyboard_interrupt(joblib_interrupted):
    done, ran, store = joblib_interrupted
    assert "all tasks ran" not in done.stdout
    assert done.stderr.rstrip().splitlines()[-1] == "KeyboardInterrupt", done.stderr[-4000:]
    # an uncaught KeyboardInterrupt: Python ends itself by SIGINT, as a shell expects
    assert done.returncode == -signal.SIGINT, done.stderr[-4000:]
    _stopped_in_few_tasks_with_no_worker_left(ran, store)


def test_ctrl_c_in_a_joblib_call_records_its_tasks_as_interrupted_not_crashed(joblib_interrupted):
    _, _, store = joblib_interrupted
    with Store(store, readonly=True) as s:
        runs = s.list_runs()
        assert [r.status for r in runs] == ["interrupted"]
        attempts = s.attempts(runs[0].run_id)
        workers = s.workers(runs[0].run_id)
        trials = s.trials(runs[0].run_id)
    # the workers were stopped by the caller's Ctrl-C, not lost: no task crashed or failed, what ran
    # at the Ctrl-C is an interrupted attempt, and no worker was started to replace a stopped one
    assert {a.status for a in attempts} <= {"ok", "interrupted"}, [a.status for a in attempts]
    assert any(a.status == "interrupted" for a in attempts)
    assert not [t.index for t in trials if t.status == "failed"]
    assert [w.reason for w in workers] == ["shutdown"] * len(workers)


@pytest.mark.parametrize("how", ["runner", "cli"])
def test_ctrl_c_in_runner_map_and_trainguard_run_records_what_ran_as_interrupted(tmp_path, how):
    done, ran, store = _interrupt(how, tmp_path)
    assert "all tasks ran" not in done.stdout
    if how == "cli":
        assert done.returncode == 130 and "interrupted" in done.stderr, done.stderr[-4000:]
    else:
        assert done.stderr.rstrip().splitlines()[-1] == "KeyboardInterrupt", done.stderr[-4000:]
        assert done.returncode == -signal.SIGINT, done.stderr[-4000:]
    _stopped_in_few_tasks_with_no_worker_left(ran, store)
    with Store(store, readonly=True) as s:
        run = s.get_run("interrupt")
        attempts = s.attempts(run.run_id)
        trials = {t.index: t.status for t in s.trials(run.run_id)}
        workers = s.workers(run.run_id)
    assert run.status == "interrupted"
    # the attempts the Ctrl-C stopped end with the run (they stayed "running" in an ended run,
    # which the report showed as trials still running); their trials stay pending for a resume
    stopped = [a for a in attempts if a.status != "ok"]
    assert stopped and [a.status for a in stopped] == ["interrupted"] * len(stopped)
    assert all(a.finished_at is not None for a in attempts)
    assert {trials[a.index] for a in stopped} == {"pending"}
    assert [w.reason for w in workers] == ["shutdown"] * len(workers)
