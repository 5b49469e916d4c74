"""What the leak check prints adds up: its sampling in words, the count note once, kinds without ids."""

from __future__ import annotations

import gc

from trainguard.leaks import _evidence
from trainguard.leaks._report import LeakReport, Verdict


def _report(
    series: list[int],
    *,
    iterations: int,
    cpm: int,
    reason: str = "r",
    counts: dict | None = None,
    hints: tuple[str, ...] = (),
) -> LeakReport:
    return LeakReport(
        Verdict.LEAK,
        reason,
        "rss",
        1.0,
        0.5,
        1.5,
        1.0,
        iterations,
        5,
        len(series),
        cpm,
        0.0,
        1.0,
        0.01,
        series=tuple({"iteration": i, "bytes": 0} for i in series),
        counts=counts,
        hints=hints,
    )


def test_sampling_says_how_the_calls_were_read_in_figures_that_add_up() -> None:
    # the hostile run: 15 calls read one by one, a planned 55 calls a reading never used
    call_by_call = _report(list(range(16)), iterations=15, cpm=55)
    text = call_by_call.sampling_text()
    assert text == "15 calls (5 warm-up), 16 readings: a baseline, then one after every call"
    assert "55" not in text and "55" not in call_by_call.summary()
    spaced = _report([0, 10, 20, 30], iterations=30, cpm=10).sampling_text()
    assert spaced.endswith("4 readings: a baseline, then one every 10 calls")
    mixed = _report([0, 10, 20, 21, 22], iterations=22, cpm=10).sampling_text()
    assert mixed.endswith("a baseline, then one every 1 to 10 calls")


def test_the_count_note_is_said_once() -> None:
    note = "entries of list train.RESULTS rose by one a call"
    once = _report([0, 1], iterations=1, cpm=1, reason=f"leak: {note}", counts={"note": note})
    assert once.counts_note() == "" and once.summary().count(note) == 1
    alone = _report([0, 1], iterations=1, cpm=1, counts={"note": note})
    assert alone.counts_note() == note and alone.summary().count(note) == 1


_UNNAMED_HOLDER: list[dict[str, list[int]]] = [{"a": [1]}]  # the dict inside has no module-global name


def test_a_kind_label_carries_no_id() -> None:
    gc.collect()
    watch = _evidence.ContainerWatch()
    try:
        index = next(i for i, c in enumerate(watch.containers) if c is _UNNAMED_HOLDER[0])
        label = watch.label(index)
        assert label == "entries of dict (unnamed, 1 before the first call)"
        assert "#" not in label
        named = next(i for i, c in enumerate(watch.containers) if c is _UNNAMED_HOLDER)
        assert watch.label(named).startswith("entries of list ") and "_UNNAMED_HOLDER" in watch.label(named)
    finally:
        watch.release()
