"""Allocator evidence in real leak checks: native memory kept through ``ctypes`` ``malloc`` is
called ``leak`` within 30 calls with the allocator named; native temporaries and a flat fast step
are not; a preloaded jemalloc is read; an unknown allocator and a step with a child process are
said so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainguard
from trainguard.leaks import _native

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import native_steps  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.solo]


@pytest.fixture(autouse=True)
def _free_kept():
    yield
    for p in native_steps.KEPT:
        native_steps._libc.free(p)
    native_steps.KEPT.clear()


def test_native_leak_called_within_30_calls_on_allocator_evidence():
    report = trainguard.leakcheck(native_steps.native_leak, max_time="60s")
    assert report.verdict.value == "leak", report.reason
    assert report.iterations <= 30, report.iterations
    assert "allocator evidence" in report.reason and "glibc" in report.reason
    alloc = report.allocator
    assert alloc["available"] and alloc["supports_leak"]
    # the exact figure: 64 KiB a call, within 5 %
    assert alloc["slope_bytes_per_iter"] == pytest.approx(65536, rel=0.05)
    assert all(r[_native.KEY] is not None for r in report.series)
    assert alloc["cost_per_reading_s"] is not None and alloc["cost_per_reading_s"] > 0
    assert json.loads(report.to_json())["allocator"]["allocator"] == "glibc"


def test_a_filling_cache_without_a_census_waits_out_the_warm_up():
    # with no census to see the arrays (attribution off here; a census too dear for the budget
    # does the same), rising bytes in use were called a leak at 15-22 calls: the cache stops at 60
    report = trainguard.leakcheck(native_steps.cache_fills_to_60, attribution=False, max_time="30s")
    assert report.verdict.value in ("no_leak", "plateau"), report.reason
    assert "allocator evidence" not in report.reason
    assert report.allocator["status"] == "uncounted" or not report.allocator["supports_leak"]


def test_native_temporaries_are_not_a_leak():
    report = trainguard.leakcheck(native_steps.native_temporaries, max_time="20s")
    assert report.verdict.value in ("no_leak", "plateau"), report.reason
    assert not report.allocator["supports_leak"]


def test_flat_fast_step_with_20s_budget_is_never_a_leak():
    """np.ones(32768).sum() at --max-time 20s was called leak at +45-87 B a call: the check kept
    every call's time in a list (about 40 B a call)."""
    report = trainguard.leakcheck(native_steps.flat_fast, max_time="20s")
    assert report.verdict.value != "leak", report.reason
    assert report.calls_per_measurement > 1


def test_max_iterations_3_gives_no_verdict():
    report = trainguard.leakcheck(lambda: None, max_iterations=3)
    assert report.verdict.value == "inconclusive"
    assert "at least 8 readings" in report.reason


def _cli(env_extra: dict[str, str], step: str, *extra: str) -> dict:
    env = dict(os.environ, **env_extra)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "leakcheck",
            f"{HERE / 'native_steps.py'}:{step}",
            "--json",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.stdout, out.stderr
    return json.loads(out.stdout)


def test_jemalloc_preloaded_is_read_and_named():
    lib = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    if not lib.exists():
        pytest.fail("libjemalloc2 missing: scripts/test.sh installs it")
    got = _cli({"LD_PRELOAD": str(lib), "TG_NATIVE_KIB": "256"}, "native_leak", "--max-time", "60s")
    assert got["verdict"] == "leak", got["reason"]
    # jemalloc's count is read, named, and sees the growth (how many calls it takes varies: 15 run
    # by hand, 34-106 under pytest in a git checkout, an unexplained difference left open)
    assert got["allocator"]["allocator"] == "jemalloc" and got["allocator"]["available"]
    assert got["allocator"]["status"] == "grows" and got["allocator"]["slope_bytes_per_iter"] > 200 * 1024
    # glibc's heaps hold nothing under jemalloc: RSS is not split, and the report says why
    assert got["allocator"]["heaps_available"] is False
    assert "jemalloc allocator does not use glibc's heaps" in got["allocator"]["heaps_text"]
    assert not any("live_bytes" in r for r in got["series"])


def test_unknown_allocator_rests_on_what_it_has(tmp_path):
    # an allocator trainguard does not know: LD_PRELOAD names mimalloc (a file that is not there is
    # ignored by the loader; detection goes by the name, as for a real preload)
    got = _cli({"LD_PRELOAD": str(tmp_path / "libmimalloc.so")}, "native_temporaries", "--max-time", "15s")
    assert got["allocator"]["available"] is False
    assert "allocator evidence unavailable" in got["allocator"]["note"]
    # the verdict rests on memory alone (this step's RSS creeps a few hundred bytes a call, near the
    # tolerance: which side of it a 15 s run lands on is not this case's point), never on the
    # allocator evidence it does not have
    assert "allocator evidence" not in got["reason"], got["reason"]


def test_step_with_a_child_process_says_the_figure_is_its_own():
    try:
        report = trainguard.leakcheck(native_steps.native_leak_with_child, max_time="40s")
    finally:
        native_steps.stop_child()
    assert "step process's only" in report.allocator["note"]
    # RSS is split at glibc's heaps only while the step is one process (the heaps are its own)
    with_child = [r for r in report.series if r.get("processes", 1) > 1]
    assert with_child and not any(r.get("live_bytes") is not None for r in with_child)
