"""What a first day of real use broke in the CLI: escape sequences reaching the terminal, NaN in
--json, one exit code for every error, params from pipes, empty and huge grids, resumed runs that
do not say they reused results, an edited function silently reusing old results, a closed pipe
marking a finished run interrupted, a resumed run's duration counted from its first start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainguard.cli import EXIT_CODES, exit_code, main
from trainguard.cli._display import error_text, visible
from trainguard.cli.run import load_params
from trainguard.exceptions import (
    ConfigError,
    FunctionChangedWarning,
    MissingDependencyError,
    SchemaVersionError,
    StoreError,
    TrialError,
    WorkerCrashedError,
)
from trainguard.outcomes import Failure
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = str(HERE / "runner_trials.py")
ESC = "\x1b"


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _write(path: Path, source: str) -> str:
    path.write_text(textwrap.dedent(source))
    return str(path)


# -- terminal-safe output ---------------------------------------------------------------------------


def test_visible_shows_every_control_character():
    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("\x1b]0;owned\x07") == "\\x1b]0;owned\\x07"
    assert visible("x\ny\r\x9b\x7f") == "x\\x0ay\\x0d\\x9b\\x7f"
    assert visible("right-to-left \u202e override") == "right-to-left \\u202e override"
    assert visible("tb\n\tline", keep_newlines=True) == "tb\n\tline"
    assert visible("ünïcødé ok ✓") == "ünïcødé ok ✓"


def test_user_strings_never_reach_the_terminal_raw(tmp_path, capsys):
    trials = _write(
        tmp_path / "esc_trials.py",
        """
        def evil(params):
            if params["i"] == 1:
                raise ValueError("\\x1b[2J\\x1b]0;owned\\x07 cleared your screen")
            return {"text": "\\x1b[31mred\\x1b[0m", "i": params["i"]}
        """,
    )
    params = tmp_path / "p.json"
    params.write_text(json.dumps([{"i": 0, "tag": "\x1b[5mblink"}, {"i": 1}]))
    db = str(tmp_path / "s.db")
    name = "esc\x1b[2Jrun"
    assert main(["run", f"{trials}:evil", "--params", str(params), "--store", db, "--name", name]) == 1
    captured = capsys.readouterr()
    assert ESC not in captured.out + captured.err
    assert "\\x1b[2J" in captured.err and "ValueError: \\x1b[2J" in captured.err
    assert main(["show", name, "--store", db]) == 0
    shown = capsys.readouterr().out
    assert ESC not in shown and "\x07" not in shown
    assert "[31mred" in shown and "[5mblink" in shown  # result and params columns, escaped
    assert main(["runs", "--store", db]) == 0
    listed = capsys.readouterr().out
    assert ESC not in listed and "esc\\x1b[2Jrun" in listed
    # --json keeps the exact strings, escaped the JSON way (\u001b), so nothing raw either
    assert main(["show", name, "--store", db, "--json"]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and _strict(out)["run"]["name"] == name


def test_a_function_load_error_is_shown_escaped(tmp_path, capsys):
    trials = _write(
        tmp_path / "bad_load.py",
        """
        raise RuntimeError("\\x1b]0;owned\\x07 import failed")

        def train(params):
            return 1
        """,
    )
    params = tmp_path / "p.json"
    params.write_text('[{"a": 1}]')
    code = main(["run", f"{trials}:train", "--params", str(params), "--store", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and ESC not in err and "\\x1b]0;owned\\x07 import failed" in err


def test_json_output_is_strict_json_with_nan_as_null(tmp_path, capsys):
    trials = _write(
        tmp_path / "nan_trials.py",
        """
        def nan(params):
            return {"loss": float("nan"), "best": float("-inf"), "ok": 1.5}
        """,
    )
    db = str(tmp_path / "s.db")
    assert main(["run", f"{trials}:nan", "--params", str(_params(tmp_path)), "--store", db, "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["results"][0]["value"] == {"loss": None, "best": None, "ok": 1.5}
    assert main(["show", out["run"], "--store", db, "--json"]) == 0
    assert _strict(capsys.readouterr().out)["trials"][0]["value"]["loss"] is None
    assert main(["runs", "--store", db, "--json"]) == 0
    _strict(capsys.readouterr().out)


def _params(tmp_path: Path, text: str = '[{"a": 1}]') -> Path:
    path = tmp_path / "p.json"
    path.write_text(text)
    return path


# -- exit codes ---------------------------------------------------------------------------------------


def test_each_error_class_has_its_own_documented_exit_code(tmp_path, capsys):
    assert exit_code(ConfigError("x")) == 2
    assert exit_code(StoreError("x")) == exit_code(SchemaVersionError("x")) == 4
    assert exit_code(WorkerCrashedError("x")) == 5
    assert exit_code(MissingDependencyError("x")) == 6
    assert exit_code(TrialError("x")) == 1
    assert len(set(EXIT_CODES)) == len(EXIT_CODES) and {0, 1, 2, 3, 4, 5, 6, 130} <= set(EXIT_CODES)
    # through the CLI: a store that is not trainguard's is a store error, not a usage error
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 64)
    assert main(["runs", "--store", str(junk)]) == 4
    assert main(["run", f"{TRIALS}:echo", "--params", str(_params(tmp_path)), "--store", str(junk)]) == 4
    assert junk.read_bytes() == b"not sqlite at all" * 64
    capsys.readouterr()
    help_text = subprocess.run(
        [sys.executable, "-m", "trainguard", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "exit codes:" in help_text and "4    store error" in help_text


# -- input edges ---------------------------------------------------------------------------------------


def test_params_from_a_pipe_or_process_substitution(tmp_path):
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"lr": [0.1, 0.2], "units": 8}')
    os.close(write_fd)
    try:
        assert load_params(f"/dev/fd/{read_fd}") == [{"lr": 0.1, "units": 8}, {"lr": 0.2, "units": 8}]
    finally:
        os.close(read_fd)
    # a real process substitution through bash, to the CLI
    db = tmp_path / "s.db"
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m trainguard run {TRIALS}:echo --params <(echo '{{\"x\": [1, 2]}}') "
            f"--store {db} --json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["value"]["x"] for r in json.loads(proc.stdout)["results"]] == [1, 2]


def test_empty_params_are_refused_in_one_line_and_nothing_is_stored(tmp_path, capsys):
    db = tmp_path / "s.db"
    for text in ("[]", "{}", "lr: []\n"):
        path = tmp_path / "p.yaml"
        path.write_text(text)
        assert main(["run", f"{TRIALS}:echo", "--params", str(path), "--store", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "trainguard show" not in err, err
    assert not db.exists()


def test_a_huge_grid_is_counted_and_refused_at_once(tmp_path, capsys):
    grid = tmp_path / "huge.yaml"
    grid.write_text("".join(f"k{i}: [{', '.join(str(v) for v in range(10))}]\n" for i in range(12)))
    assert main(["run", f"{TRIALS}:echo", "--params", str(grid), "--store", str(tmp_path / "s.db")]) == 2
    err = capsys.readouterr().err
    assert "1,000,000,000,000 trials" in err and "--max-trials" in err and err.count("\n") == 1
    assert not (tmp_path / "s.db").exists()  # refused before the store was made: nothing was started
    grid.write_text("a: [1, 2, 3]\nb: [1, 2]\n")
    assert main(["run", f"{TRIALS}:echo", "--params", str(grid), "--max-trials", "5"]) == 2
    assert "6 trials" in capsys.readouterr().err


# -- resumes, edited functions, fresh runs --------------------------------------------------------------


def test_a_resumed_run_says_what_it_reused_and_what_ran(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    args = ["run", f"{TRIALS}:echo", "--params", str(_params(tmp_path, '{"x": [1, 2, 3]}')), "--store", db]
    assert main([*args, "--name", "r"]) == 0
    first = capsys.readouterr().err
    assert first.count("trial ") == 3 and "3 ran now" in first
    assert main([*args, "--name", "r"]) == 0
    again = capsys.readouterr().err
    assert "trial 0" not in again  # the stored results are not reprinted as if they ran
    assert "all 3 finished earlier and reused, none ran now" in again
    assert main([*args, "--name", "r", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert (out["reused"], out["ran"]) == (3, 0) and all(r["reused"] for r in out["results"])


def test_an_edited_function_is_detected_and_fresh_runs_it_again(tmp_path, capsys):
    from trainguard import Runner

    source = tmp_path / "versioned.py"
    source.write_text("def train(params):\n    return params['x'] * 2\n")
    db = tmp_path / "s.db"
    with Runner(store=db) as runner:
        assert [r.value for r in runner.map(f"{source}:train", [{"x": 1}, {"x": 2}], name="v")] == [2, 4]
    # a comment or blank line is no change
    source.write_text("# a comment\n\ndef train(params):\n    return params['x'] * 2\n")
    with Runner(store=db) as runner, _no_function_warning():
        runner.map(f"{source}:train", [{"x": 1}, {"x": 2}], name="v")
    source.write_text("def train(params):\n    return params['x'] * 3\n")
    with Runner(store=db) as runner, pytest.warns(FunctionChangedWarning, match=r"fresh=True.*--fresh"):
        stale = runner.map(f"{source}:train", [{"x": 1}, {"x": 2}], name="v")
    assert [r.value for r in stale] == [2, 4] and all(r.reused for r in stale)
    # the CLI says it on one line and names --fresh
    params = _params(tmp_path, '[{"x": 1}, {"x": 2}]')
    assert main(["run", f"{source}:train", "--params", str(params), "--store", str(db), "--name", "v"]) == 0
    err = capsys.readouterr().err
    assert "warning: run 'v' reuses 2 stored results computed by an earlier version of train()" in err
    argv = ["run", f"{source}:train", "--params", str(params), "--store", str(db), "--name", "v", "--fresh"]
    assert main([*argv, "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert [r["value"] for r in out["results"]] == [3, 6] and out["ran"] == 2
    with Store(db, readonly=True) as store:
        names = [s.name for s in store.list_runs()]
        assert names[1] == "v" and names[0].startswith("v.replaced-")  # nothing recorded is lost
        assert [t.value for t in store.trials(store.get_run(names[0]).run_id)] == [2, 4]
    with Runner(store=db) as runner, _no_function_warning():
        assert [r.value for r in runner.map(f"{source}:train", [{"x": 1}, {"x": 2}], name="v")] == [3, 6]


class _no_function_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error", FunctionChangedWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def test_a_closed_output_pipe_does_not_interrupt_a_run(tmp_path):
    db = tmp_path / "s.db"
    params = _params(tmp_path, json.dumps([{"x": i, "sleep_s": 0.1} for i in range(8)]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard", "run", f"{TRIALS}:echo", "--params", str(params)]
        + ["--store", str(db), "--name", "piped"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # what `2>&1 | head -1` reads, then it exits
    proc.stdout.close()
    rc = proc.wait(timeout=120)
    assert b"trial 0: ok" in first
    with Store(db, readonly=True) as store:
        run = store.get_run("piped")
        assert run.status == "completed", run.status
        assert [t.status for t in store.trials(run.run_id)] == ["ok"] * 8
    assert rc == 0


def test_a_resumed_runs_duration_is_its_work_time(tmp_path):
    import sqlite3

    idle_s = 86_400.0
    with Store(tmp_path / "s.db") as store:
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
        store.finish_run(run.run_id, "interrupted")
    # the run sat idle a day between its two sessions: its first session's records moved a day back
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE events SET time = time - ?", (idle_s,))
        conn.execute("UPDATE session_settings SET started_at = started_at - ?", (idle_s,))
        conn.execute(
            "UPDATE runs SET created_at = created_at - ?, updated_at = updated_at - ?,"
            " finished_at = finished_at - ?",
            (idle_s, idle_s, idle_s),
        )
    conn.close()
    with Store(tmp_path / "s.db") as store:
        store.begin_run("r", "m:f", [{"a": 1}], {})
        store.finish_run(run.run_id, "completed")
        summary = store.summary(run.run_id)
    assert summary.sessions == 2
    # the two sessions' work, not the day since the first start
    assert 0 <= summary.duration_s <= summary.finished_at - summary.created_at - idle_s, summary


def test_error_text_says_the_exception_once():
    error = Failure("exception", "ValueError: bad lr", exc_type="builtins.ValueError")
    assert error_text(error) == "ValueError: bad lr"
    assert error_text(Failure("timeout", "killed at the trial timeout (2 s)")) == (
        "timeout: killed at the trial timeout (2 s)"
    )
    assert error_text(Failure("not_serializable", "not JSON", exc_type="TypeError")) == (
        "not_serializable: TypeError: not JSON"
    )
    assert (
        error_text(Failure("exception", "no prefix", exc_type="mod.CustomError")) == "CustomError: no prefix"
    )


# -- show -------------------------------------------------------------------------------------------------


def test_show_has_params_and_says_each_failure_by_its_status(tmp_path, capsys):
    db = tmp_path / "s.db"
    with Store(db) as store:
        run = store.begin_run("mixed", "t.py:f", [{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}], {})
        errors = {
            0: Failure("exception", "ValueError: bad lr", exc_type="builtins.ValueError"),
            1: Failure("timeout", "killed at the trial timeout (2 s)"),
        }
        for index, error in errors.items():
            store.start_attempt(run.run_id, index, 1, 0)
            store.finish_attempt(
                run.run_id, index, 1, status=error.status, error=error, peak_rss_bytes=1, duration_s=1.0
            )
            store.finish_trial(
                run.run_id,
                index,
                status="failed",
                value=None,
                error=error,
                attempts=1,
                peak_rss_bytes=1,
                worker_id=0,
                duration_s=1.0,
            )
        store.finish_run(run.run_id, "failed")
    assert main(["show", "mixed", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "params" in out and "lr=0.3" in out
    assert (
        "ValueError: bad lr" in out
        and "builtins.ValueError" not in out
        and "ValueError: ValueError" not in out
    )
    assert "timeout: killed at the trial timeout (2 s)" in out


def test_sizes_in_one_comparison_never_read_equal():
    from trainguard.runner.policy import Policy, check_limits
    from trainguard.store._schema import describe_worker_end
    from trainguard.units import format_bytes_apart

    assert format_bytes_apart(2_040_000_000, 2_030_000_000) == ("1.90 GiB", "1.89 GiB")
    assert format_bytes_apart(2**31 + 5, 2**31) == ("2,147,483,653 B", "2,147,483,648 B")
    decision = check_limits(
        Policy(memory_limit=2_030_000_000), rss_bytes=2_040_000_000, gpu_bytes=None, elapsed_s=1
    )
    assert "1.90 GiB > 1.89 GiB" in decision.message
    text = describe_worker_end("killed_memory", {"rss_bytes": 2_040_000_000, "limit_bytes": 2_030_000_000})
    assert "1.90 GiB > 1.89 GiB" in text


# -- demo progress ------------------------------------------------------------------------------------------


def test_a_measured_half_reports_each_trial_as_it_finishes(tmp_path):
    from trainguard._measured_loop import run_measured_child

    # the child starts trial 1 only once the parent has seen trial 0: a half that reported its trials
    # only at the end would leave the child waiting, and the child then says so and fails
    seen_0 = tmp_path / "seen-0"
    child = (
        "import os, sys, time\n"
        "from trainguard._measured_loop import trial_line\n"
        "for i in range(3):\n"
        "    start = time.time()\n"
        "    if i == 1:\n"
        "        deadline = time.monotonic() + 120\n"
        f"        while not os.path.exists({str(seen_0)!r}):\n"
        "            if time.monotonic() > deadline:\n"
        "                sys.exit('trial 0 was never reported while the child ran')\n"
        "            time.sleep(0.02)\n"
        "    print(trial_line(i, start, time.time(), 10_000_000, {'i': i}), flush=True)\n"
    )
    seen: list[int] = []

    def on_trial(index: int, duration_s: float, rss: int) -> None:
        seen.append(index)
        if index == 0:
            seen_0.touch()

    half = run_measured_child(
        [sys.executable, "-c", child], 3, mode="naive", env=dict(os.environ), on_trial=on_trial
    )
    assert seen == [0, 1, 2] and half.trials == 3


# -- the GPU test on a GPU machine whose torch has no CUDA ----------------------------------------------------


def test_gpu_runner_test_skips_where_torch_has_no_cuda(tmp_path):
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pytest.skip("torch is not installed")
    if "+cpu" not in version:
        pytest.skip(f"torch {version} may have CUDA: the real GPU tests run instead")
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"  # a machine with a GPU and its driver, as conftest sees it
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-00000000)'\n")
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "tests/gpu/test_runner_gpu.py",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=HERE.parent.parent,
    )
    # 5: the module skips itself at import (torch sees no CUDA device), so pytest collects nothing
    assert proc.returncode == 5, proc.stdout[-3000:]
    assert "failed" not in proc.stdout and "error" not in proc.stdout.lower(), proc.stdout[-3000:]
    assert "skipped" in proc.stdout and "sees no CUDA device" in proc.stdout


def test_doctor_shows_environment_values_escaped(monkeypatch, capsys):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2\x1b[2J\x1b]0;owned\x07")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "MALLOC_ARENA_MAX=2\\x1b[2J" in out


def test_log_lines_show_control_characters_too(tmp_path):
    db = tmp_path / "s.db"
    params = _params(tmp_path)
    argv = [sys.executable, "-m", "trainguard", "-v", "run", f"{TRIALS}:echo", "--params", str(params)]
    argv += ["--store", str(db), "--name", "log\x1b[2Jname", "--fresh"]
    for _ in range(2):  # the second replaces the first and logs both names at INFO
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    assert "INFO" in proc.stderr and "log\\x1b[2Jname" in proc.stderr
    assert ESC not in proc.stderr


def test_demo_refused_before_work_leaves_no_temporary_folder(tmp_path, monkeypatch) -> None:
    """A demo refused for a bad --trials leaves no empty trainguard-demo-* folder behind."""
    import tempfile

    from trainguard.cli import main as cli_main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli_main(["demo", "--trials", "1"]) == 2
    assert list(tmp_path.iterdir()) == []
