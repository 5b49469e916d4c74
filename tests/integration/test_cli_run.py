"""``trainguard run`` as a subprocess and in-process: grids, JSON output, errors, and resume after
the supervisor itself is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _waits import signals_as_in_a_terminal, wait_for, wait_gone
from trainguard.cli import main
from trainguard.cli.run import expand_grid, load_params
from trainguard.exceptions import ConfigError
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = str(HERE / "runner_trials.py")


def test_grid_expands_to_the_cartesian_product(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("lr: [0.001, 0.01]\nunits: [32, 64, 128]\nepochs: 1\n")
    params = load_params(str(grid))
    assert len(params) == 6 and params[0] == {"lr": 0.001, "units": 32, "epochs": 1}
    assert expand_grid([{"a": 1}, {"a": 2}], "x") == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("g.yaml", "lr: [0.1, 0.2\nunits: 3\n", "not valid YAML at line 2, column"),
        ("g.json", '{"lr": [0.1,, 0.2]}', "not valid JSON at line 1, column 13"),
        ("g.json", "[1, 2]", "item 0 is a int, not an object"),
        ("g.yaml", "just a string\n", "not a str"),
        ("g.yaml", "lr: []\n", "empty list"),
        ("g.yaml", "", "no params"),
    ],
)
def test_bad_params_files_say_where(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_params(str(path))
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_run_json_output_and_exit_codes(tmp_path, trainguard_cli):
    db = str(tmp_path / "runs.db")
    params = tmp_path / "p.json"
    params.write_text(json.dumps([{"kind": "ok"}, {"kind": "raise"}, {"kind": "ok"}]))
    proc = trainguard_cli(
        "run", f"{TRIALS}:fault", "--params", str(params), "--store", db, "--name", "cli1", "--json"
    )
    assert proc.returncode == 1, proc.stderr  # a trial failed
    out = json.loads(proc.stdout)
    assert out["run"] == "cli1" and [r["status"] for r in out["results"]] == ["ok", "failed", "ok"]
    assert out["results"][1]["error"]["status"] == "exception"
    # stdin, a grid, all ok -> 0; default name is stable
    proc = trainguard_cli(
        "run", f"{TRIALS}:echo", "--params", "-", "--store", db, "--json", input='{"x": [1, 2]}'
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["value"]["x"] for r in out["results"]] == [1, 2] and out["run"].startswith("echo-")


def test_cli_usage_errors_are_one_line_exit_2(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text("[{}]")
    cases = [
        (["--workers", "0"], "--workers 0"),
        (["--memory-limit", "4 potatoes"], "4 potatoes"),
        (["--keras-backend", "theano"], "theano"),
        (["--allocator", "/nonexistent/lib.so"], "does not exist"),
        (["--retry-on", "gremlins"], "gremlins"),
    ]
    for extra, needle in cases:
        code = main(
            ["run", f"{TRIALS}:echo", "--params", str(params), "--store", str(tmp_path / "x.db"), *extra]
        )
        err = capsys.readouterr().err
        assert code == 2 and needle in err and err.count("\n") == 1, (extra, err)
    code = main(["run", "missing.py:fn", "--params", str(params), "--store", str(tmp_path / "x.db")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_supervisor_sigkilled_mid_run_resumes_with_every_trial_finished_once(tmp_path):
    db = tmp_path / "resume.db"
    n = 14
    params = tmp_path / "p.json"
    params.write_text(json.dumps([{"x": i, "sleep_s": 0.25} for i in range(n)]))
    args = [sys.executable, "-m", "trainguard", "run", f"{TRIALS}:echo", "--params", str(params)]
    args += ["--store", str(db), "--name", "r1", "--workers", "2", "--no-progress"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def four_finished() -> tuple[int, list[int]] | None:
        with Store(db, readonly=True) as store:
            run = store.get_run("r1")
            if run is None:
                return None
            finished = sum(t.status == "ok" for t in store.trials(run.run_id))
            return (finished, [w.pid for w in store.workers(run.run_id)]) if finished >= 4 else None

    # the store not made yet, or mid-creation, is "not yet"
    finished, workers = wait_for(four_finished, 60, "four trials to finish", ignore=(Exception,))
    assert finished < n, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    # its workers notice and exit on their own (no orphans)
    wait_gone(workers, 60, f"the killed supervisor's workers {workers} to exit")
    # run it again: only the unfinished trials run
    done = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [r["value"]["x"] for r in out["results"]] == list(range(n))
    with Store(db, readonly=True) as store:
        run = store.get_run("r1")
        trials = store.trials(run.run_id)
        attempts = store.attempts(run.run_id)
        assert run.sessions == 2
    assert all(t.status == "ok" for t in trials)
    ok_attempts = sorted(a.index for a in attempts if a.status == "ok")
    assert ok_attempts == list(range(n))  # every trial finished exactly once
    assert all(a.status in ("ok", "interrupted") for a in attempts)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "gone"


def test_progress_snapshot_is_available_while_running(tmp_path):
    import threading

    from trainguard.runner import Runner

    seen = []
    with Runner(workers=1, store=None) as runner:
        iterator = runner.imap(f"{TRIALS}:echo", [{"x": i, "sleep_s": 0.2} for i in range(4)])

        finished = threading.Event()

        def watch():  # until the run ends: a loaded machine starts the worker in more than 2 s
            while not finished.is_set():
                p = runner.progress()
                if p is not None:
                    seen.append(p)
                time.sleep(0.05)

        t = threading.Thread(target=watch)
        t.start()
        try:
            results = list(iterator)
        finally:
            finished.set()
            t.join()
    assert len(results) == 4
    assert any(p.workers and p.workers[0].rss_bytes for p in seen)
    assert any(p.done >= 1 and p.eta_s is not None for p in seen)
    # the ETA counts down between finishes (it equalled, and rose with, the elapsed time)
    after_first = [p for p in seen if p.done == 1 and p.eta_s is not None]
    assert len(after_first) < 2 or after_first[-1].eta_s < after_first[0].eta_s
    assert os.getpid() not in [w.pid for p in seen for w in p.workers]


def test_ctrl_c_stops_the_run_kills_workers_and_records_it(tmp_path):
    db = tmp_path / "int.db"
    params = tmp_path / "p.json"
    params.write_text(json.dumps([{"x": i, "sleep_s": 30} for i in range(3)]))
    args = [sys.executable, "-m", "trainguard", "run", f"{TRIALS}:echo", "--params", str(params)]
    proc = subprocess.Popen(
        args + ["--store", str(db), "--name", "int", "--no-progress"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=signals_as_in_a_terminal,  # Ctrl-C as a terminal delivers it
    )

    def workers_once_a_trial_runs() -> list[int] | None:
        with Store(db, readonly=True) as store:
            run = store.get_run("int")
            if run is None or not store.attempts(run.run_id):
                return None
            return [w.pid for w in store.workers(run.run_id)]

    # Ctrl-C lands while a trial runs; the store not made yet is "not yet"
    pids = wait_for(workers_once_a_trial_runs, 60, "a trial to start", ignore=(Exception,))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)  # a backstop: it ends within a second when idle
    assert proc.returncode == 130 and "interrupted" in err
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]
    with Store(db, readonly=True) as store:
        run = store.get_run("int")
        assert run.status == "interrupted"
        assert [t.status for t in store.trials(run.run_id)] == ["pending"] * 3
        assert [w.reason for w in store.workers(run.run_id)] == ["shutdown"]


@pytest.mark.portable
def test_tree_tracking_portable_runs_and_a_tier_this_machine_lacks_is_one_line(tmp_path, trainguard_cli):
    grid = tmp_path / "grid.yaml"
    grid.write_text("x: [1, 2]\n")
    db = str(tmp_path / "r.db")
    out = trainguard_cli(
        "run", f"{TRIALS}:echo", "--params", str(grid), "--store", db, "--tree-tracking", "portable", "--json"
    )
    assert out.returncode == 0, out.stderr
    with Store(db) as store:
        run = store.list_runs()[0]
        assert all(w.config.get("tree_tracking") == "portable" for w in store.workers(run.run_id))
    other = "windows" if sys.platform != "win32" else "cgroup"
    out = trainguard_cli(
        "run", f"{TRIALS}:echo", "--params", str(grid), "--store", db, "--tree-tracking", other
    )
    assert out.returncode != 0 and f"tree_tracking='{other}' needs" in out.stderr
    assert "Traceback" not in out.stderr
