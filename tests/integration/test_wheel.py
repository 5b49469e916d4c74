"""`python -m build` makes a wheel that installs with its extras and runs: trainguard is installed
from a clone or a wheel built from one (it is not on a package index), so the wheel is the way to
put it on another machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("build", reason="the test extra installs build (pip install -e '.[test]')")
pytest.importorskip("hatchling", reason="the test extra installs hatchling (pip install -e '.[test]')")


@pytest.mark.slow
def test_the_wheel_builds_installs_with_its_extras_and_runs(tmp_path):
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = dist.glob("trainguard-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "trainguard/cli/__init__.py" in names and "trainguard/_js/index.js" in names
    for extra in ("nvml", "plot", "demo", "optuna", "ray", "test"):
        assert f"Provides-Extra: {extra}" in metadata
    assert "Requires-Dist: matplotlib>=3.7; extra == 'plot'" in metadata
    # the extras resolve (against what this environment has: no index is asked, nothing changes)
    dry = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--quiet",
            "--report",
            "-",
            f"{wheel}[plot,optuna]",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-2000:]
    report = json.loads(dry.stdout)
    [item] = [i for i in report["install"] if i["metadata"]["name"] == "trainguard"]
    assert item["requested_extras"] == ["optuna", "plot"]
    # installed on its own (its dependencies come from this environment), it runs from the wheel
    target = tmp_path / "site"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target)}
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            "import trainguard, sys; print(trainguard.__file__); sys.argv=['trainguard', '--help'];"
            " from trainguard.cli import console_main; console_main()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines()[0].startswith(str(target)) and "leakcheck" in ran.stdout
