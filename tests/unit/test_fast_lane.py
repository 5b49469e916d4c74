"""The fast lane (``bash scripts/test.sh --fast``): what it leaves out, and that what it keeps stays
under its budget by the recorded durations."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _lanes import (
    DURATIONS,
    FAST_LANE_BUDGET_S,
    FAST_TEST_MAX_S,
    costliest,
    fast_lane_excludes,
    load_durations,
    longest_files_first,
)

ROOT = Path(__file__).resolve().parents[2]


def test_slow_marks_and_long_recorded_tests_are_left_out_and_new_tests_kept():
    durations = {"a::quick": 0.2, "a::long": FAST_TEST_MAX_S + 1, "a::marked": 0.1}
    excluded = fast_lane_excludes(["a::quick", "a::long", "a::marked", "a::new"], ["a::marked"], durations)
    assert excluded == {"a::long", "a::marked"}


def test_files_run_longest_first_each_files_tests_together_and_in_order():
    nodes = ["a.py::one", "a.py::two", "b.py::one", "c.py::one", "b.py::two", "d.py::new"]
    durations = {"a.py::one": 1.0, "a.py::two": 1.0, "b.py::one": 5.0, "b.py::two": 0.5, "c.py::one": 2.0}
    order = [nodes[i] for i in longest_files_first(nodes, durations)]
    # b 5.5 s, a 2.0, c 2.0 (a was collected first), d unknown: the median test (1.0 s)
    assert order == ["b.py::one", "b.py::two", "a.py::one", "a.py::two", "c.py::one", "d.py::new"]
    # with no record, collection order with each file's tests together
    assert longest_files_first(nodes, {}) == [0, 1, 2, 4, 3, 5]


def test_the_recorded_lane_fits_its_budget_and_covers_each_test_folder():
    durations = load_durations()
    assert durations, f"{DURATIONS} is missing: record it with pytest --record-durations {DURATIONS}"
    kept = {node: s for node, s in durations.items() if s <= FAST_TEST_MAX_S}
    assert sum(kept.values()) <= FAST_LANE_BUDGET_S, sum(kept.values())
    folders = {node.split("/")[1] for node in kept}
    assert {"unit", "integration", "catalogue", "frameworks"} <= folders, folders


def test_record_durations_merges_into_the_file(tmp_path):
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"elsewhere::kept": 9.0}))
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_one():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_lanes", "--record-durations",
         str(record), str(probe)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT / "tests"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(record.read_text())
    assert written["elsewhere::kept"] == 9.0
    assert set(written) == {"elsewhere::kept", "test_probe.py::test_one"}


def test_the_cpu_record_sums_each_process_file_and_lists_the_costliest_first(tmp_path):
    (tmp_path / "cpu-1.json").write_text(json.dumps({"tests/a.py::x": 1.0, "tests/b.py::y": 5.0}))
    (tmp_path / "cpu-2.json").write_text(json.dumps({"tests/a.py::z": 6.0}))
    lines = costliest(tmp_path)
    assert lines[0] == "3 tests, 12 CPU seconds"
    assert [line.split()[1] for line in lines[1:3]] == ["tests/a.py", "tests/b.py"]  # 7 s, then 5 s
    assert [line.split()[1] for line in lines[3:]] == ["tests/a.py::z", "tests/b.py::y", "tests/a.py::x"]
