"""The slow commands say what they are doing before their first slow import, not after it.

``trainguard demo``, ``doctor --deep`` and ``leakcheck`` each wait seconds on a framework's import
(TensorFlow: 10-20 s on 2 cores). Each test puts a stand-in where that import happens, which
writes a marker and fails at once, and checks that the command's first stderr line came before the
marker. No framework is imported, so each test takes a second or two; nothing is timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import main

MARK = "STAND-IN IMPORTED"


FRAMEWORKS = ("torch", "tensorflow", "jax", "keras")


def _stand_in_frameworks(folder: Path, log: Path, names: tuple[str, ...] = ("keras", "tensorflow")) -> Path:
    """Packages named ``names`` that append MARK to ``log`` and fail when imported."""
    for name in names:
        package = folder / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"with open({str(log)!r}, 'a') as fh:\n"
            f"    fh.write({MARK!r} + ' {name}\\n')\n"
            f"raise ImportError('{name} stands in for the real one in this test')\n"
        )
    return folder


def _path_with(folder: Path) -> str:
    """PYTHONPATH with ``folder`` first."""
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def _lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.strip()]


def test_demo_says_it_loads_tensorflow_before_the_naive_loop_imports_it(tmp_path, monkeypatch):
    log = tmp_path / "order.log"
    fakes = _stand_in_frameworks(tmp_path / "fakes", log)
    # the naive loop's process finds the stand-ins first; this process only looks them up
    monkeypatch.setenv("PYTHONPATH", _path_with(fakes))
    monkeypatch.syspath_prepend(str(fakes))
    with open(log, "a", buffering=1) as stderr:  # this process's stderr and the marker, in one file
        monkeypatch.setattr(sys, "stderr", stderr)
        code = main(["demo", "--trials", "2", "--store", str(tmp_path / "demo.db")])
        monkeypatch.undo()
    lines = _lines(log)
    assert code != 0  # the stand-in failed the naive loop
    marker = next(i for i, line in enumerate(lines) if line.startswith(MARK))
    before = lines[:marker]
    assert before and any("loading TensorFlow" in line for line in before), lines
    assert before[0].startswith("1/2 naive loop"), lines  # the demo's first line


def test_doctor_deep_names_each_import_before_it_starts(tmp_path):
    log = tmp_path / "order.log"
    fakes = _stand_in_frameworks(tmp_path / "fakes", log, names=FRAMEWORKS)
    env = {**os.environ, "PYTHONPATH": _path_with(fakes)}
    with open(log, "a") as stderr:  # its stderr and the markers, in one file
        proc = subprocess.run(
            [sys.executable, "-m", "trainguard", "doctor", "--deep", "--json"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=60,
            env=env,
        )
    lines = _lines(log)
    assert proc.returncode == 0, lines[-20:]
    report = json.loads(proc.stdout)  # progress stays off stdout
    installed = [name for name in FRAMEWORKS if report["frameworks"].get(name)]
    if not installed:
        pytest.skip("no framework is installed: doctor --deep imports none")
    assert lines[0].startswith("doctor --deep: importing "), lines
    for name in installed:
        said = next(i for i, line in enumerate(lines) if line.startswith(f"doctor --deep: importing {name} "))
        assert said < lines.index(f"{MARK} {name}"), lines


def test_leakcheck_says_it_starts_before_the_file_is_imported(tmp_path, monkeypatch):
    log = tmp_path / "order.log"
    step = tmp_path / "train.py"
    step.write_text(
        f"with open({str(log)!r}, 'a') as fh:\n"
        f"    fh.write({MARK!r} + ' train.py\\n')\n"
        "raise RuntimeError('stops the check before its first step')\n"
        "def step():\n    pass\n"
    )
    with open(log, "a", buffering=1) as stderr:
        monkeypatch.setattr(sys, "stderr", stderr)
        code = main(["leakcheck", f"{step}:step", "--json"])
        monkeypatch.undo()
    lines = _lines(log)
    assert code == 2, lines
    marker = lines.index(f"{MARK} train.py")
    assert marker >= 1 and lines[0].startswith("trainguard leakcheck: starting a fresh process for "), lines
    assert lines[-1].startswith("trainguard leakcheck: error: "), lines  # then the one error line
