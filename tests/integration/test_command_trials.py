"""Command trials: any program as a trial, held to the same limits and causes as a Python trial."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psutil
import pytest

import trainguard
from _waits import wait_for
from trainguard.exceptions import ConfigError
from trainguard.store import Store

HERE = Path(__file__).resolve().parent
SHELL = HERE / "command_trial.sh"
PYTHON = HERE / "command_trial.py"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_shell_trials_killed_at_memory_limit_timed_out_crashing_each_with_its_cause(tmp_path):
    pidfiles = {m: tmp_path / f"{m}.pid" for m in ("memory", "sleep", "crash")}
    params = [{"mode": "ok", "n": 1}] + [{"mode": m, "pidfile": str(p)} for m, p in pidfiles.items()]
    params.append({"mode": "ok", "n": 2})
    policy = trainguard.Policy(memory_limit="300MB", timeout="2500ms")
    store = tmp_path / "runs.db"
    with trainguard.Runner(workers=1, policy=policy, store=store) as runner:
        results = runner.map(trainguard.Command(["bash", str(SHELL)]), params, name="shell")
    by_mode = {r.params["mode"] + str(r.params.get("n", "")): r for r in results}
    assert by_mode["ok1"].ok and by_mode["ok1"].value == {"got": {"mode": "ok", "n": 1}}
    assert by_mode["ok2"].ok  # the run went on after three failures
    assert by_mode["memory"].error.status == "killed_memory"
    assert by_mode["memory"].peak_rss_bytes >= 300e6
    assert by_mode["sleep"].error.status == "timeout"
    assert by_mode["crash"].error.status == "crashed"
    assert "SIGSEGV" in by_mode["crash"].error.message
    # the program's children died with it
    children = {mode: int(path.read_text()) for mode, path in pidfiles.items()}
    wait_for(
        lambda: not [m for m, pid in children.items() if _alive(pid)],
        60,
        f"the trials' children {children} to end",
    )
    with Store(store, readonly=True) as st:
        info = st.get_run("shell")
        stored = {t.index: t.status for t in st.trials(info.run_id)}
    assert stored == {0: "ok", 1: "failed", 2: "failed", 3: "failed", 4: "ok"}


def test_python_program_bad_output_each_one_line_and_the_run_goes_on(tmp_path):
    modes = ["exit3", "no_result", "malformed", "flood", "huge", "file", "ok"]
    store = tmp_path / "runs.db"
    with trainguard.Runner(workers=1, store=store, max_result_bytes="1MiB") as runner:
        results = runner.map(
            trainguard.Command([sys.executable, str(PYTHON)]),
            [{"mode": m, "x": 21} for m in modes],
            name="py",
        )
    r = {res.params["mode"]: res for res in results}
    assert r["exit3"].error.status == "exception"
    assert "exited with code 3: bad things happened" in r["exit3"].error.message
    assert "printed no result line" in r["no_result"].error.message
    assert "TRAINGUARD_RESULT" in r["no_result"].error.message  # says what to print
    assert "not JSON" in r["malformed"].error.message
    assert r["flood"].ok and r["flood"].value == {"flooded": True}
    assert r["huge"].error.status == "result_too_large"
    assert "over max_result_bytes" in r["huge"].error.message
    assert r["file"].value == {"from_file": {"mode": "file", "x": 21}}
    assert r["ok"].value == {"x2": 42}
    for res in results:
        assert "\n" not in (res.error.message if res.error is not None else "")
    with Store(store, readonly=True) as st:
        trials = st.trials(st.get_run("py").run_id)
    assert [t.status for t in trials] == ["failed", "failed", "failed", "ok", "failed", "ok", "ok"]


def test_command_bad_input_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="not found on PATH"):
        trainguard.Command(["no-such-program-xyz", "train.py"])
    with pytest.raises(ConfigError, match="empty"):
        trainguard.Command([])
    with pytest.raises(ConfigError, match="does not exist"):
        trainguard.Command(["./missing.sh"])
    with pytest.raises(ConfigError, match="script 'missing_train.py' does not exist"):
        trainguard.Command([sys.executable, "missing_train.py"])


def test_cli_run_cmd(tmp_path, trainguard_cli):
    grid = tmp_path / "grid.json"
    grid.write_text('{"mode": ["ok"], "x": [1, 2, 3]}')
    out = trainguard_cli(
        "run",
        "--cmd",
        f"{sys.executable} {PYTHON}",
        "--params",
        str(grid),
        "--store",
        str(tmp_path / "r.db"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    import json

    payload = json.loads(out.stdout)
    assert payload["run"].startswith("cmd-command_trial.py-")
    assert [r["value"] for r in payload["results"]] == [{"x2": 2}, {"x2": 4}, {"x2": 6}]
    both = trainguard_cli("run", "x.py:f", "--cmd", "python3 x.py", "--params", str(grid), timeout=60)
    assert both.returncode == 2 and "not both" in both.stderr
    assert signal.SIGSEGV  # the shell test above relies on it
