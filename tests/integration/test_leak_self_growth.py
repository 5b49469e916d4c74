"""The check's own growth in the process it measures, on a step that keeps nothing (20 ms of sleep,
read after every call, no census and no allocator evidence: what is left is the loop itself).

Each look's statistics run over the series so far, a little longer each time; their working set
touched new pages at every look while the warm-up ran them on 24 readings only: +1.59-1.64 KiB a
call over calls 20-150 (4 runs). Warmed up at the check's longest series (``max_measurements``):
+0.86-0.90 KiB a call (4 runs), the readings' own rows. The bound sits between the two."""

from __future__ import annotations

import time

import numpy as np

import trainguard

KIB = 1024.0


def _keeps_nothing() -> None:
    time.sleep(0.02)


def test_a_step_that_keeps_nothing_reads_under_1_2_kib_a_call_read_every_call() -> None:
    report = trainguard.leakcheck(
        _keeps_nothing,
        max_iterations=150,
        min_iterations=150,
        calls_per_measurement=1,
        attribution=False,
        allocator_evidence=False,
    )
    it = np.array([r["iteration"] for r in report.series], dtype=float)
    rss = np.array([r["bytes"] for r in report.series], dtype=float)
    settled = it >= 20
    slope = float(np.polyfit(it[settled], rss[settled], 1)[0])
    assert slope < 1.2 * KIB, f"{slope / KIB:.2f} KiB a call"
    assert report.verdict != "leak", report.reason
