"""``trainguard show`` of a large run stays in bounded memory (issue 34, item 5).

A store of 100,000 trials is built by bulk SQL into the real schema (``bulk_store.py``); ``show``
runs as a subprocess and its peak RSS is its own ``VmHWM`` at exit (``bulk_store.run_measured``).
Reading every trial, attempt, allocator reading and ``trial_stats`` event into Python took 505 MiB
here (and 5.6 GiB for a user's 100,000-trial run: Theil-Sen over one worker's whole series is
quadratic); streamed, it is about the interpreter's own 110 MiB, and 120 MiB at a million trials
(BENCHMARKS.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from bulk_store import build_store, run_measured  # noqa: E402 - the helper beside this file

#: the bound asserted at 100,000 trials: the interpreter with rich and the store (about 110 MiB on
#: a 3-trial store) and a margin; the whole-run reads took 505 MiB
SHOW_RSS_BOUND_MIB = 250


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("show-memory") / "big.db"
    build_store(path, 100_000, trials_per_worker=1000)
    return path


def _run_measured(store: Path, *extra: str) -> tuple[float, str]:
    """``trainguard show big`` on ``store``: (its peak RSS in MiB, its stdout)."""
    peak_mib, out, _ = run_measured("show", "big", "--store", str(store), *extra)
    return peak_mib, out


def test_show_of_100k_trials_stays_in_bounded_memory(big_store: Path) -> None:
    peak_mib, out = _run_measured(big_store)
    assert peak_mib < SHOW_RSS_BOUND_MIB, f"show took {peak_mib:.0f} MiB of RSS for 100,000 trials"
    lines = out.splitlines()
    assert lines[1].startswith("trials: 100000 (98970 ok, 1030 failed, 0 pending)")
    assert "99950 more trials not shown (--max-trials N or --json)" in out
    assert "workers 100" in lines[1]
    # the fragmentation table: the newest 50 rows, ending with the last trial
    assert " 99999 │ torch " in out and " 99949 │ torch " not in out and " 99950 │ torch " in out
    # each worker's bytes in use over its 1,000 trials, read from an even sample of them
    assert "worker 0: bytes in use after each trial (glibc): 47.7 MiB → 48.2 MiB over 1000 trials" in out
    assert "92 more workers (" in out


def test_show_trial_of_100k_trials_stays_in_bounded_memory(big_store: Path) -> None:
    peak_mib, out = _run_measured(big_store, "--trial", "96")
    assert peak_mib < SHOW_RSS_BOUND_MIB
    assert "trial 96" in out and "1 attempt" in out
