"""The fast lane and the durations it is cut from.

``pytest --fast`` (``bash scripts/test.sh --fast``) runs every test whose recorded duration in
``tests/durations.json`` is under :data:`FAST_TEST_MAX_S`, and no test marked ``slow``. A test the
record does not know yet (a new one) runs in the lane until a whole run records it.

Every run orders the test files longest first by the same record (:func:`longest_files_first`),
each file's tests together and in their own order: with the parallel phase's work stealing
(``--dist worksteal`` in ``scripts/test.sh``) the long files start at once and the short ones fill in
around them, instead of a long file's tests coming last to one process while the others stand idle
(a quiet 30-minute phase had about 9 minutes of that tail).

``pytest --record-durations tests/durations.json`` writes each test's setup + call + teardown time
from the run into that file, merged with what it held for the tests that did not run.

``pytest --record-cpu DIR`` (or ``TRAINGUARD_RECORD_CPU=DIR``) writes each test's CPU seconds (this process's and its reaped children's,
user and system) to ``DIR/cpu-<pid>.json``, one file a pytest process: on 2 cores the parallel phase
is bound by CPU, not by wall, so CPU is what a cut must lower. ``python tests/_lanes.py DIR`` prints
the files' tests by CPU, the costliest first.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
# a test longer than this on the recording machine (2 cores) stays out of the fast lane; chosen so the
# lane's recorded total stays under 5 minutes on 2 cores (tests/unit/test_fast_lane.py checks that)
FAST_TEST_MAX_S = 2.0
FAST_LANE_BUDGET_S = 300.0


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds per test node id ({} when there is no record yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(k): float(v) for k, v in data.items()}


def fast_lane_excludes(
    node_ids: Iterable[str],
    slow: Iterable[str],
    durations: Mapping[str, float],
    max_s: float = FAST_TEST_MAX_S,
) -> set[str]:
    """The node ids the fast lane leaves out: marked slow, or recorded longer than ``max_s``."""
    slow_ids = set(slow)
    return {n for n in node_ids if n in slow_ids or durations.get(n, 0.0) > max_s}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trainguard lanes")
    group.addoption(
        "--fast",
        action="store_true",
        help=f"the fast lane: tests recorded under {FAST_TEST_MAX_S} s in tests/durations.json, none marked slow",
    )
    group.addoption(
        "--record-durations",
        metavar="PATH",
        default=None,
        help="write each test's duration (setup + call + teardown) to PATH as JSON, merged with what it holds",
    )
    group.addoption(
        "--record-cpu",
        metavar="DIR",
        default=None,
        help="write each test's CPU seconds (with its reaped children's) to DIR/cpu-<pid>.json",
    )


def select_fast_lane(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect what the fast lane leaves out (called from conftest's collection hook)."""
    if not config.getoption("--fast"):
        return
    slow = [item.nodeid for item in items if item.get_closest_marker("slow")]
    excluded = fast_lane_excludes((item.nodeid for item in items), slow, load_durations())
    if excluded:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in excluded])
        items[:] = [item for item in items if item.nodeid not in excluded]


def longest_files_first(node_ids: list[str], durations: Mapping[str, float]) -> list[int]:
    """The order to run ``node_ids`` in, as indices: test files by their recorded total seconds,
    longest first (ties in collection order), each file's tests together and in collection order.
    A test the record does not know counts as the record's median test."""
    known = sorted(durations.values())
    typical = known[len(known) // 2] if known else 0.0
    paths = [node.split("::", 1)[0] for node in node_ids]
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, (node, path) in enumerate(zip(node_ids, paths, strict=True)):
        totals[path] = totals.get(path, 0.0) + durations.get(node, typical)
        first.setdefault(path, i)
    return sorted(range(len(node_ids)), key=lambda i: (-totals[paths[i]], first[paths[i]], i))


def order_longest_files_first(items: list[pytest.Item]) -> None:
    """Reorder the collected items in place (called from conftest's collection hook)."""
    order = longest_files_first([item.nodeid for item in items], load_durations())
    items[:] = [items[i] for i in order]


class DurationRecorder:
    """Adds up each test's phases and writes them at the end of the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        merged = {**load_durations(self.path), **{k: round(v, 3) for k, v in self.seconds.items()}}
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")


def cpu_seconds() -> float:
    """User + system CPU of this process and of its children that have been waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class CpuRecorder:
    """Each test's CPU seconds (setup, call and teardown), written at the end of the session."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"cpu-{os.getpid()}.json"
        folder.mkdir(parents=True, exist_ok=True)
        self.seconds: dict[str, float] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> object:
        before = cpu_seconds()
        try:
            return (yield)
        finally:
            self.seconds[item.nodeid] = round(cpu_seconds() - before, 3)

    def pytest_sessionfinish(self) -> None:
        if self.seconds:
            self.path.write_text(json.dumps(self.seconds, indent=0) + "\n")


def costliest(folder: Path, most: int = 40) -> list[str]:
    """The lines ``python tests/_lanes.py DIR`` prints: files, then tests, by CPU seconds."""
    seconds: dict[str, float] = {}
    for path in sorted(folder.glob("cpu-*.json")):
        seconds.update(json.loads(path.read_text()))
    files: dict[str, float] = {}
    for node, cpu in seconds.items():
        files[node.split("::", 1)[0]] = files.get(node.split("::", 1)[0], 0.0) + cpu
    lines = [f"{len(seconds)} tests, {sum(seconds.values()):.0f} CPU seconds"]
    lines += [f"{cpu:8.1f}  {name}" for name, cpu in sorted(files.items(), key=lambda kv: -kv[1])[:most]]
    lines += [f"{cpu:8.1f}  {node}" for node, cpu in sorted(seconds.items(), key=lambda kv: -kv[1])[:most]]
    return lines


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-durations")
    if path:
        config.pluginmanager.register(DurationRecorder(Path(path)), "trainguard-durations")
    # the variable reaches both phases of the test command, and a clone's, without changing its line
    folder = config.getoption("--record-cpu") or os.environ.get("TRAINGUARD_RECORD_CPU")
    if folder:
        config.pluginmanager.register(CpuRecorder(Path(folder)), "trainguard-cpu")


if __name__ == "__main__":
    print("\n".join(costliest(Path(sys.argv[1]))))
