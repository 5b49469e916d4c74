"""Every line of ``trainguard doctor`` is true of this machine (issue 35, item 5): each claim is
checked against what the test reads itself: /proc/self/cgroup, /proc/self/mountinfo,
/sys/fs/cgroup, pynvml."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's cgroups")


def _nvml_here() -> tuple[bool, str | None]:
    """(NVML usable, the words doctor must use when not), read without trainguard."""
    try:
        import pynvml
    except ImportError:
        return False, "pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - the class names the cause
        return False, "cannot be loaded" if "LibraryNotFound" in type(
            err
        ).__name__ else "pynvml is installed but"
    return True, None


def _cgroups_here() -> dict[str, object]:
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    v1_memory = any("memory" in line.split(":", 2)[1].split(",") for line in lines if line.count(":") >= 2)
    kinds = {
        row.partition(" - ")[2].split(" ", 1)[0]
        for row in Path("/proc/self/mountinfo").read_text().splitlines()
    }
    v2_mounts = [
        row.split(" - ")[0].split()[4]
        for row in Path("/proc/self/mountinfo").read_text().splitlines()
        if row.partition(" - ")[2].startswith("cgroup2 ")
    ]
    layout = (
        "hybrid"
        if {"cgroup", "cgroup2"} <= kinds
        else "v1"
        if "cgroup" in kinds
        else "v2"
        if "cgroup2" in kinds
        else None
    )
    return {"v1_memory": v1_memory, "layout": layout, "v2_mounts": v2_mounts}


@pytest.fixture(scope="module")
def doctor(trainguard_cli_module):
    out = trainguard_cli_module("doctor", "--json")
    assert out.returncode == 0, out.stderr
    text = trainguard_cli_module("doctor")
    assert text.returncode == 0, text.stderr
    # the table's rows, their folded continuations joined: the box characters dropped
    flat = text.stdout.translate({ord(c): " " for c in "│┃"})
    return json.loads(out.stdout), " ".join(flat.split())


@pytest.fixture(scope="module")
def trainguard_cli_module():
    import subprocess

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "COLUMNS": "400"}  # no folding: the rows are read as text
        return subprocess.run(
            [sys.executable, "-m", "trainguard", *argv], capture_output=True, text=True, timeout=300, env=env
        )

    return run


def test_the_cgroup_line_names_the_memory_controller_this_process_is_in(doctor):
    report, text = doctor
    here = _cgroups_here()
    assert report["cgroup_layout"] == here["layout"]
    if here["v1_memory"] and Path("/sys/fs/cgroup/memory").is_dir():
        assert report["cgroup_version"] == 1
        assert report["cgroup_memory_path"].startswith("/sys/fs/cgroup/memory")
        assert "memory: v1 controller" in text and "v2 controller" not in text
    elif report["cgroup_version"] == 2:
        assert Path(report["cgroup_memory_path"], "memory.current").exists()
        assert "memory: v2 controller" in text
    limit_file = Path(report["cgroup_memory_path"] or "/nonexistent", "memory.limit_in_bytes")
    if limit_file.exists():
        raw = int(limit_file.read_text())
        assert (report["cgroup_limit_bytes"] is None) == (raw >= 1 << 60)
    if here["layout"] == "hybrid":
        assert "hybrid layout (v1 controllers and a v2 tree)" in text


def test_a_cgroup_v2_tree_is_claimed_only_where_one_is_mounted_and_named(doctor):
    report, _ = doctor
    here = _cgroups_here()
    tree = next(g for g in report["process"]["guarantees"] if g["name"] == "tree membership")
    if "cgroup v2" in tree["how"]:
        named = tree["how"].split("(under ", 1)[1].split(")", 1)[0]
        assert any(named.rstrip("/").startswith(m.rstrip("/")) for m in here["v2_mounts"]), (named, here)
        assert Path(named, "cgroup.procs").exists()
    kill = next(g for g in report["process"]["guarantees"] if g["name"] == "kill")
    if kill["how"] == "cgroup.kill":
        major, minor = (int(p) for p in os.uname().release.split(".")[:2])
        assert (major, minor) >= (5, 14)


def test_nvml_is_never_exact_where_there_is_none(doctor):
    report, text = doctor
    usable, words = _nvml_here()
    gpu = next(g for g in report["process"]["guarantees"] if g["name"] == "GPU per process")
    portable = next(g for g in report["process"]["portable"] if g["name"] == "GPU per process")
    assert report["nvml_available"] is usable
    if usable:
        assert gpu["level"] == "exact" and report["nvml_absence"] is None
        return
    assert gpu["level"] == portable["level"] == "missing"
    assert words in gpu["how"] and words in report["nvml_absence"]
    assert f"GPUs none seen: {report['nvml_absence']}".replace("  ", " ") in text
    assert "NVML by pid" not in text
