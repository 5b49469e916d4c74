"""Steps for the holder-search gate, checked in a fresh interpreter: a clean one and one that keeps
an array a call in the global ``KEPT``.

    python holder_gate_steps.py clean|leaking

prints one JSON line: the verdict, its reason, the heap walks the check made (how many kinds each
searched), the holders it named and how many censuses it took.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import trainguard
from trainguard.leaks import holders

KEPT: list = []
A = np.ones((64, 64))


def clean_step() -> None:
    (A @ A).sum()


def leaking_step() -> None:
    (A @ A).sum()
    KEPT.append(np.ones(4096))


def main(which: str) -> None:
    walks: list[int] = []
    real = holders.holder_chains

    def counted(predicates: dict, **kwargs: Any) -> dict:
        walks.append(len(predicates))
        return real(predicates, **kwargs)

    holders.holder_chains = counted  # type: ignore[assignment]
    report = trainguard.leakcheck(clean_step if which == "clean" else leaking_step, max_time="20s")
    out = {
        "verdict": report.verdict.value,
        "reason": report.reason,
        "walks": walks,
        "holders": [g.holder for g in report.growth_by_kind if g.holder],
        "censuses": (report.counts or {}).get("censuses", 0),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
