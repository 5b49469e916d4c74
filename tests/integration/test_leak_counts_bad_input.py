"""Count evidence on the two bad inputs: memory held where the GC cannot walk, and a census too
slow for the step."""

from __future__ import annotations

import ctypes
import ctypes.util
import time

import pytest

import trainguard

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
_KEPT_ADDRESSES: list[int] = []  # plain ints: nothing a census counts as memory


def native_leak() -> None:
    """256 KiB a call from C's malloc, touched and never freed: RSS grows, no Python object does.
    The 20 ms of "work" lets the census budget pay for a few censuses."""
    time.sleep(0.02)
    ptr = _libc.malloc(256 * 1024)
    _libc.memset(ptr, 1, 256 * 1024)


@pytest.mark.solo
def test_memory_held_by_c_code_says_counts_found_nothing() -> None:
    report = trainguard.leakcheck(native_leak)  # the default 2-minute budget; it stops at the verdict
    assert report.verdict.value == "leak", report.summary()
    assert report.counts is not None and report.counts["censuses"] >= 2, report.counts
    assert report.counts["status"] == "found_nothing", report.counts
    # bytes in use name the native growth; the counts say they found nothing Python-visible
    assert "counts found no growing kind" in report.reason, report.reason
    assert "allocator evidence" in report.reason and report.iterations <= 30, report.reason
    assert "native memory" in report.summary()


_HEAP: list[object] = []


def heavy_heap_step() -> None:
    """Fast, but the first call leaves 300,000 live objects that every census must walk."""
    if not _HEAP:
        _HEAP.extend([i] for i in range(300_000))


def test_a_census_slower_than_the_step_allows_falls_back_with_a_note() -> None:
    report = trainguard.leakcheck(heavy_heap_step, max_time="3s", min_iterations=10**9)
    assert report.counts is not None
    assert report.counts["status"] == "left_out", report.counts
    assert "rests on memory alone" in report.counts["note"]
    # no census after the fallback, so the censuses cannot push the check past its budget (how long
    # the check takes against max_time is bench/leakcheck_overhead.py's to measure)
    assert report.counts["censuses"] <= 3
