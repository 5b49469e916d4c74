"""Store.batch: a trial's end written as one transaction (the supervisor's per-trial cost), each write
inside it still whole, and what it wrote kept as though each had committed alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.exceptions import StoreError
from trainguard.store import Store


def _finish(store: Store, run_id: int, index: int, value: int) -> bool:
    return store.finish_trial(
        run_id, index, status="ok", value=value, error=None, attempts=1, peak_rss_bytes=1000,
        worker_id=0, duration_s=0.5,
    )  # fmt: skip


def _trial_end(store: Store, run_id: int, index: int) -> None:
    store.start_attempt(run_id, index, 1, 0)
    store.add_event(run_id, "trial_stats", f"trial {index}", index=index)
    _finish(store, run_id, index, value=index + 10)


def _stats(store: Store, run_id: int) -> list[str]:
    return [e.message for e in store.events(run_id) if e.kind == "trial_stats"]


def test_a_batch_is_one_commit_that_a_reader_sees_whole(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with Store(db) as store, Store(db, readonly=True) as reader:
        run = store.begin_run("r", "m:f", [{"a": 1}, {"a": 2}], {})
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        with store.batch():
            _trial_end(store, run.run_id, 0)
            # another connection sees nothing of the batch before it ends
            assert [t.status for t in reader.trials(run.run_id)] == ["pending", "pending"]
            assert _stats(reader, run.run_id) == []
        store._conn.set_trace_callback(None)
        assert [t.value for t in reader.trials(run.run_id)] == [10, None]
        assert _stats(reader, run.run_id) == ["trial 0"]
        assert len(reader.attempts(run.run_id, 0)) == 1
    # the same three writes outside a batch commit three times
    assert [s for s in statements if s.startswith(("BEGIN", "COMMIT"))] == ["BEGIN IMMEDIATE", "COMMIT"]


def test_a_batch_ended_by_an_exception_keeps_what_was_written_before_it(tmp_path: Path) -> None:
    # as though each write had committed alone: the disk-full path records the attempt's end
    # and then raises; an interrupt after a write keeps that write
    with Store(tmp_path / "runs.db") as store:
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
        with pytest.raises(KeyboardInterrupt), store.batch():
            store.start_attempt(run.run_id, 0, 1, 0)
            store.add_event(run.run_id, "trial_stats", "trial 0", index=0)
            raise KeyboardInterrupt  # the supervisor interrupted before the trial's result
        assert not store._conn.in_transaction
        assert len(store.attempts(run.run_id, 0)) == 1 and _stats(store, run.run_id) == ["trial 0"]
        assert [t.status for t in store.trials(run.run_id)] == ["pending"]
        store.finish_run(run.run_id, "interrupted")  # later writes work: nothing was left open
        assert store.get_run("r").status == "interrupted"


def test_a_write_that_fails_inside_a_batch_leaves_the_others_whole(tmp_path: Path) -> None:
    with Store(tmp_path / "runs.db") as store:
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
        with store.batch():
            store.add_event(run.run_id, "trial_stats", "kept")
            # a write of two statements whose second fails, its error caught by its caller: its
            # first statement is undone, the batch's other writes are not
            with pytest.raises(StoreError, match="cannot write store"), store._write() as conn:
                conn.execute("UPDATE trials SET status='failed' WHERE run_id=?", (run.run_id,))
                conn.execute("INSERT INTO no_such_table VALUES (1)")
            _finish(store, run.run_id, 0, value=3)
        assert [(t.status, t.value) for t in store.trials(run.run_id)] == [("ok", 3)]
        assert _stats(store, run.run_id) == ["kept"]


def test_a_batch_inside_a_batch_leaves_the_outer_one_open(tmp_path: Path) -> None:
    with Store(tmp_path / "runs.db") as store:
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        with store.batch():
            with store.batch():
                store.add_event(run.run_id, "trial_stats", "inner")
            _finish(store, run.run_id, 0, value=5)  # still the outer batch's
        store._conn.set_trace_callback(None)
        assert [s for s in statements if s.startswith(("BEGIN", "COMMIT"))] == ["BEGIN IMMEDIATE", "COMMIT"]
        assert [t.value for t in store.trials(run.run_id)] == [5] and _stats(store, run.run_id) == ["inner"]
