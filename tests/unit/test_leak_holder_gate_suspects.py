"""The holder search (a walk of the heap, seconds on a TensorFlow process) runs only on what is
suspected: never on a clean run whose censuses saw nothing rise; on a leak, as before. (The same on
real checks, each in a fresh interpreter: tests/integration/test_leak_holder_gate.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.leaks import _evidence, _run, holders
from trainguard.leaks._report import KindGrowth
from trainguard.leaks.stats import CountTrend, Verdict


def _trend(status: str) -> CountTrend:
    return CountTrend(status, 1.0, 0.0, 5, 5, 5, 0.01)


def _support(*kinds: tuple[str, str]) -> _evidence.CountSupport:
    found = tuple(_evidence.KindEvidence(k, _trend(s), None, True) for k, s in kinds)
    return _evidence.CountSupport(False, found, False)


#: one ndarray more at one census: growth_by_kind's slope puts it above zero on a clean run
NOISE = (
    KindGrowth("numpy.ndarray", 0.25, 2048.0),
    KindGrowth("numpy ndarray float64[64] cpu", 0.25, 2048.0, "by dtype and shape"),
)


def test_a_clean_verdict_searches_only_the_kinds_the_censuses_saw_rise() -> None:
    suspected = _evidence.suspected_kinds
    assert suspected(NOISE, None, cleared=True) == frozenset()
    assert suspected(NOISE, _support(("entries of list m.L", "plateau")), cleared=True) == frozenset()
    # a kind that rose is searched, with the dtype-and-shape detail of its family
    rose = _support(("numpy.ndarray", "plateau"))
    assert suspected(NOISE, rose, cleared=True) == {k.kind for k in NOISE}
    # a verdict that does not clear the step: every kind that grows, as before
    assert suspected(NOISE, None, cleared=False) == {k.kind for k in NOISE}


@pytest.mark.parametrize(
    ("verdict", "searched"), [(Verdict.NO_LEAK, 0), (Verdict.LEAK, 1), (Verdict.PLATEAU, 1)]
)
def test_the_heap_is_walked_only_when_the_verdict_leaves_a_kind_suspected(
    monkeypatch: pytest.MonkeyPatch, verdict: Verdict, searched: int
) -> None:
    walks: list[dict] = []

    def recorded(predicates: dict, **_: Any) -> dict:
        walks.append(predicates)
        return {}

    monkeypatch.setattr(holders, "holder_chains", recorded)
    counts = _run._Counts(enabled=False, watch=None)  # no census has seen anything rise
    assert counts.with_holders(NOISE, verdict) == NOISE
    assert len(walks) == searched
