"""A worker freezes what it holds before its first trial (and after a trial that imported), so
the collection after each trial walks only what trials made, not every object its imports made."""

from __future__ import annotations

from pathlib import Path

from trainguard import Runner

FN = f"{Path(__file__).parent / 'gc_freeze_trials.py'}:frozen"


def test_the_worker_freezes_its_imports_before_the_first_trial_and_after_one_that_imported():
    with Runner(workers=1, store=None) as runner:
        results = runner.map(FN, [{}, {"import": True}, {}, {}])
    counts = [r.value for r in results]
    assert all(r.ok for r in results), [r.error for r in results]
    assert counts[0] > 1000  # trainguard's, the trial module's: frozen before trial 0 ran
    assert counts[2] > counts[1]  # trial 1 imported a module: frozen after it
    assert counts[3] - counts[2] < (counts[2] - counts[1]) / 10  # no import: nothing much to freeze
