"""A worker freezes what it holds before its first trial, so the collection after each trial walks
only what trials made, not every object its imports made; never after, so what a trial keeps stays
visible to the collector and to ``gc.get_objects()`` (the census, a trial's own counts)."""

from __future__ import annotations

from pathlib import Path

from trainguard import Runner

FN = f"{Path(__file__).parent / 'gc_freeze_trials.py'}:frozen"


def test_the_worker_freezes_its_imports_before_the_first_trial_only():
    with Runner(workers=1, store=None) as runner:
        results = runner.map(FN, [{}, {"import": True}, {}])
    assert all(r.ok for r in results), [r.error for r in results]
    counts = [r.value for r in results]
    assert counts[0] > 1000  # trainguard's, the trial module's: frozen before trial 0 ran
    # nothing a trial made or imported is frozen after it (a frozen object may only be freed)
    assert counts[2] <= counts[0]
