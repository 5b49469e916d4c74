"""@trainguard.isolated with real worker processes: values, exceptions, limits, bad input."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

import trainguard
from trainguard.exceptions import ConfigError, MemoryLimitError, TrialTimeoutError

sys.path.insert(0, str(Path(__file__).parent))
import isolated_funcs as funcs  # noqa: E402

SRC = str(Path(trainguard.__file__).resolve().parents[1])


@pytest.fixture(autouse=True, scope="module")
def _close_workers():
    yield
    for fn in (funcs.leak_30mb, funcs.lookup, funcs.own_error, funcs.allocate, funcs.sleep_for, funcs.touch):
        fn.close()


@pytest.mark.slow
def test_a_function_leaking_30mb_a_call_leaves_the_caller_flat():
    proc = psutil.Process()
    funcs.leak_30mb(-1)  # the first call imports the Runner's machinery here
    gc.collect()
    before = proc.memory_info().rss
    values = [funcs.leak_30mb(i) for i in range(8)]
    gc.collect()
    growth = proc.memory_info().rss - before
    assert [v["i"] for v in values] == list(range(8))
    assert all(v["pid"] != proc.pid for v in values)
    assert growth < 40 * 2**20, growth / 2**20
    # the same function in this process keeps its 30 MB here (what the guard spares the caller)
    rss = proc.memory_info().rss
    funcs.leak_30mb.__wrapped__(0)
    assert proc.memory_info().rss - rss > 25 * 2**20
    funcs.KEPT.clear()


def test_values_and_exceptions_come_back_as_themselves(capfd):
    assert funcs.lookup({"a": [1, 2]}, "a") == [1, 2]
    with pytest.raises(KeyError) as info:
        funcs.lookup({"a": 1}, "b")
    assert info.value.args == ("b",)
    assert any("raised in a trainguard worker" in n and "table[key]" in n for n in info.value.__notes__)
    with pytest.raises(funcs.OwnError) as own:
        funcs.own_error(7)
    assert own.value.code == 7
    # the warm worker served both calls of a function that does not grow
    assert funcs.lookup({"pid": 1}, "pid") == 1


def test_output_of_the_worker_shows_in_the_caller(capsys):
    funcs.leak_30mb(99)
    assert "call 99" in capsys.readouterr().out
    funcs.leak_30mb.close()


@pytest.mark.slow
def test_memory_kill_and_timeout_raise_the_runners_errors_and_the_next_call_runs():
    with pytest.raises(MemoryLimitError, match="memory_limit"):
        funcs.allocate(700)
    assert funcs.allocate(10) == 10 * 2**20
    with pytest.raises(TrialTimeoutError, match="timeout of 1s"):
        funcs.sleep_for(30)
    assert funcs.sleep_for(0.01) == 0.01


def test_arguments_that_cannot_be_sent_are_one_line_before_anything_runs(tmp_path):
    marker = tmp_path / "ran"
    with open(tmp_path / "f.txt", "w") as fh:
        with pytest.raises(ConfigError) as info:
            funcs.touch(str(marker), fh)
    assert str(info.value).startswith("argument 2 of touch() cannot be sent") and "open file" in str(
        info.value
    )
    with pytest.raises(ConfigError, match="^argument thing= of touch\\(\\) cannot be sent.*lock"):
        funcs.touch(str(marker), thing=threading.Lock())
    torch = pytest.importorskip("torch")
    with pytest.raises(ConfigError, match="on meta; move it to the CPU"):
        funcs.touch(str(marker), torch.nn.Linear(2, 2, device="meta"))
    assert not marker.exists()


def test_bad_options_are_one_line():
    with pytest.raises(ConfigError, match="not both"):
        trainguard.isolated(memory_limit="1GB", policy=trainguard.Policy(memory_limit="2GB"))(len)
    with pytest.raises(trainguard.UnitError):
        trainguard.isolated(timeout="soon")(len)
    with pytest.raises(ConfigError, match="needs a function"):
        trainguard.isolated(42)


def test_a_function_defined_in_main_runs_isolated(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            import trainguard

            @trainguard.isolated
            def square(x):
                return x * x, os.getpid()

            value, pid = square(7)
            print(value, pid != os.getpid())
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["49", "True"]
