"""The recorder reads a trial's stage history only for a trial of the run that staged: a dispatch
of a trial that never staged reads nothing from the store (a real SQLite store)."""

from __future__ import annotations

from trainguard.runner.session._recorder import Recorder
from trainguard.store import Store


def test_a_trial_that_never_staged_is_not_read_and_one_that_did_is(tmp_path, monkeypatch):
    store = Store(tmp_path / "s.db")
    recorder = Recorder(store, "staged")
    recorder.begin("m:f", [{"i": 0}, {"i": 1}], {})
    assert recorder.run_id is not None
    store.add_stage(recorder.run_id, 1, 1, 2, event="checkpoint", worker_id=0)  # an earlier session's
    reads: list[tuple] = []
    real = store.stages
    monkeypatch.setattr(store, "stages", lambda *args: reads.append(args) or real(*args))
    assert recorder.stages(0) == [] and recorder.stages(0) == []
    assert reads == [(recorder.run_id,)]  # which trials staged, once for the session
    assert [s.stage for s in recorder.stages(1)] == [2]
    # a stage this session writes is read back at the trial's next dispatch
    recorder.add_stage(0, 1, 1, event="checkpoint", worker_id=0)
    assert [(s.stage, s.event) for s in recorder.stages(0)] == [(1, "checkpoint")]
    store.close()
