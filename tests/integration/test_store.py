"""The results store on real SQLite files: schema, resume, exactly-once results, readers, bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainguard.exceptions import ConfigError, SchemaVersionError, StoreError
from trainguard.outcomes import Failure
from trainguard.store import SCHEMA_VERSION, Store


def _finish(store: Store, run_id: int, index: int, value=None, status: str = "ok") -> bool:
    return store.finish_trial(
        run_id,
        index,
        status=status,
        value=value,
        error=None,
        attempts=1,
        peak_rss_bytes=1000 + index,
        worker_id=0,
        duration_s=0.5,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


def test_creates_schema_in_wal_mode(db: Path) -> None:
    with Store(db) as store:
        assert not store.readonly
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "runs", "trials", "attempts", "workers", "events", "samples"} <= tables
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    # reopening an existing store neither fails nor re-creates anything
    with Store(db) as store:
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
    with Store(db) as store:
        assert store.get_run("r") == run


def test_close_is_idempotent_and_closed_store_says_so(db: Path) -> None:
    store = Store(db)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.list_runs()


def test_params_and_results_roundtrip_as_json(db: Path) -> None:
    params = [{"lr": 0.1, "layers": [64, 32], "name": "a"}, {"lr": float("nan")}, 3]
    with Store(db) as store:
        run = store.begin_run("sweep", "train.py:train", params, {"workers": 2})
        assert run.trial_count == 3 and run.config == {"workers": 2} and not run.resumed
        assert _finish(store, run.run_id, 0, value={"loss": 0.25, "curve": [1, 2]})
        store.finish_trial(
            run.run_id,
            1,
            status="failed",
            value=None,
            error=Failure("exception", "boom", exc_type="ValueError"),
            attempts=2,
            peak_rss_bytes=None,
            worker_id=None,
            duration_s=None,
        )
        trials = store.trials(run.run_id)
    assert [t.index for t in trials] == [0, 1, 2]
    assert trials[0].params == params[0] and trials[0].value == {"loss": 0.25, "curve": [1, 2]}
    assert trials[1].status == "failed" and trials[1].error == Failure(
        "exception", "boom", exc_type="ValueError"
    )
    assert trials[1].params["lr"] != trials[1].params["lr"]  # NaN survives
    assert trials[2].status == "pending" and trials[2].params == 3
    # stored as JSON text, not pickle
    conn = sqlite3.connect(db)
    assert json.loads(conn.execute("SELECT value_json FROM trials WHERE idx=0").fetchone()[0])["loss"] == 0.25
    conn.close()


def test_not_json_serializable_is_a_config_error_and_writes_nothing(db: Path) -> None:
    with Store(db) as store:
        with pytest.raises(ConfigError, match=r"params\[1\]\['fn'\] is a function.*JSON"):
            store.begin_run("r", "m:f", [{"a": 1}, {"fn": lambda: 1}], {})
        assert store.list_runs() == []
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
        with pytest.raises(ConfigError, match="result of trial 0.*is a set"):
            _finish(store, run.run_id, 0, value={"s": {1, 2}})
        assert store.unfinished_trials(run.run_id) == [(0, {"a": 1})]
        assert _finish(store, run.run_id, 0, value=1.5)


def test_resume_same_params_returns_the_run_and_only_unfinished_trials(db: Path) -> None:
    params = [{"i": i} for i in range(5)]
    with Store(db) as store:
        run = store.begin_run("sweep", "m:f", params, {})
        store.start_worker(run.run_id, 0, 4242, {"threads": 1})
        for i in (0, 2):
            store.start_attempt(run.run_id, i, 1, 0)
            store.finish_attempt(run.run_id, i, 1, status="ok", error=None, peak_rss_bytes=10, duration_s=0.1)
            assert _finish(store, run.run_id, i, value=i)
        store.start_attempt(run.run_id, 3, 1, 0)  # the supervisor "dies" here
    with Store(db) as store:
        # same params in another key order: still the same run
        again = store.begin_run("sweep", "m:f", [{"i": i} for i in range(5)], {"resumed": True})
        assert again.resumed and again.run_id == run.run_id and again.sessions == 2
        assert store.unfinished_trials(run.run_id) == [(1, {"i": 1}), (3, {"i": 3}), (4, {"i": 4})]
        assert [w.reason for w in store.workers(run.run_id)] == ["interrupted"]
        assert store.attempts(run.run_id, 3)[0].status == "interrupted"
        assert not _finish(store, run.run_id, 0, value="again")  # finished trials stay as they were
        assert store.trials(run.run_id)[0].value == 0
        assert any(e.kind == "run_resumed" for e in store.events(run.run_id))
        with pytest.raises(ConfigError, match="already exists.*different params.*another name"):
            store.begin_run("sweep", "m:f", params[:4], {})
        assert len(store.list_runs()) == 1


def test_finish_trial_is_exactly_once(db: Path) -> None:
    with Store(db) as store:
        run = store.begin_run("r", "m:f", [{}], {})
        assert _finish(store, run.run_id, 0, value=1)
        assert not _finish(store, run.run_id, 0, value=2)
        assert not store.finish_trial(
            run.run_id,
            0,
            status="failed",
            value=None,
            error=Failure("exception", "x"),
            attempts=3,
            peak_rss_bytes=None,
            worker_id=None,
            duration_s=None,
        )
        trial = store.trials(run.run_id)[0]
        assert (trial.status, trial.value, trial.attempts) == ("ok", 1, 1)
        with pytest.raises(StoreError, match="no trial 7"):
            _finish(store, run.run_id, 7, value=1)
        with pytest.raises(ConfigError, match="'ok' or 'failed'"):
            store.finish_trial(
                run.run_id,
                0,
                status="done",
                value=1,
                error=None,
                attempts=1,
                peak_rss_bytes=None,
                worker_id=None,
                duration_s=None,
            )


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from trainguard.store import Store
    N = 20000
    store = Store(sys.argv[1])
    run = store.begin_run("kill", "m:f", [{"i": i} for i in range(N)], {})
    print("ready", flush=True)
    while True:
        for index, params in store.unfinished_trials(run.run_id):
            store.start_attempt(run.run_id, index, 1, 0)
            store.add_event(run.run_id, "trial", "started", index=index)
            store.finish_attempt(run.run_id, index, 1, status="ok", error=None, peak_rss_bytes=1, duration_s=0.0)
            store.finish_trial(run.run_id, index, status="ok", value={"i": params["i"], "sq": params["i"] ** 2},
                               error=None, attempts=1, peak_rss_bytes=1, worker_id=0, duration_s=0.0)
        break
    print("done", flush=True)
    """
)


@pytest.mark.slow
def test_sigkilled_writer_loses_no_finished_trial_and_resume_finishes_each_once(
    db: Path, tmp_path: Path
) -> None:
    script = tmp_path / "writer.py"
    script.write_text(_KILLED_WRITER)
    finished_before: dict[int, object] = {}
    done = 0
    # each kill lands once the writer has finished some more trials, read from the file: a fixed
    # delay after "ready" landed before its first commit when the machine was busy
    for more in (20, 100, 300):
        proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120
        with Store(db, readonly=True) as watcher:
            while time.monotonic() < deadline and proc.poll() is None:
                (summary,) = watcher.list_runs()
                if summary.trials_ok >= done + more:
                    break
                time.sleep(0.02)  # a look reads the whole run (30-80 ms): leave the writer the CPU
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        with Store(db, readonly=True) as reader:
            run = reader.get_run("kill")
            trials = reader.trials(run.run_id)
        for t in trials:
            # every row is whole: ok with its value, or pending with nothing
            assert (t.status, t.value is None) in {("ok", False), ("pending", True)}
            if t.status == "ok":
                assert t.value == {"i": t.index, "sq": t.index**2}
                finished_before.setdefault(t.index, t.value)
        # nothing that was finished before is ever lost
        assert all(trials[i].status == "ok" for i in finished_before)
        assert len(finished_before) >= done + more, "the writer was killed before it finished enough trials"
        done = len(finished_before)
    assert done < 20000, "the kills should land mid-run: raise N in the writer if the machine is very fast"
    with Store(db) as store:
        run = store.begin_run("kill", "m:f", [{"i": i} for i in range(20000)], {})
        left = [i for i, _ in store.unfinished_trials(run.run_id)]
        assert left == sorted(set(range(20000)) - set(finished_before))
        assert all(_finish(store, run.run_id, i, value={"i": i, "sq": i * i}) for i in left)
        # a second supervisor replaying results already stored writes nothing
        assert not any(_finish(store, run.run_id, i, value="replayed") for i in range(0, 20000, 97))
        assert all(t.status == "ok" for t in store.trials(run.run_id))


_SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    from trainguard.store import Store
    with Store(sys.argv[1]) as store:
        run = store.begin_run("live", "m:f", [{"i": i} for i in range(150)], {})
        print("ready", flush=True)
        for i in range(150):
            store.add_samples(run.run_id, 0, [(time.time(), 10**6 * i, None, None)])
            store.finish_trial(run.run_id, i, status="ok", value=i, error=None, attempts=1,
                               peak_rss_bytes=10**6 * i, worker_id=0, duration_s=0.01)
            time.sleep(0.005)
    """
)


def test_reader_reads_consistently_while_the_writer_writes(db: Path, tmp_path: Path) -> None:
    script = tmp_path / "slow_writer.py"
    script.write_text(_SLOW_WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        seen: list[int] = []
        with Store(db, readonly=True) as reader:
            while proc.poll() is None:
                (summary,) = reader.list_runs()
                assert summary.trials_ok + summary.trials_pending == 150
                seen.append(summary.trials_ok)
                with pytest.raises(StoreError, match="read-only"):
                    reader.add_event(summary.run_id, "x", "y")
                time.sleep(0.01)
        assert proc.wait() == 0
    finally:
        proc.kill()
        proc.stdout.close()
    assert seen == sorted(seen), "a reader never sees finished trials go back to pending"
    assert len(set(seen)) > 3, "the reader should have seen the run in progress"
    with Store(db, readonly=True) as reader:
        assert reader.list_runs()[0].trials_ok == 150


def test_samples_are_bounded_per_worker_and_keep_peaks_and_span(db: Path) -> None:
    with Store(db, max_samples_per_worker=100, sample_resolution=0.1) as store:
        run = store.begin_run("r", "m:f", [{}], {})
        t0 = 1_700_000_000.0
        rss = [(i * 7919) % 1000 for i in range(5000)]
        rss[3333] = 10**9  # a one-sample spike
        for start in range(0, 5000, 250):  # 500 s at 10 Hz, in batches as a sampler would send them
            batch = [(t0 + i * 0.1, rss[i], rss[i] // 2, None) for i in range(start, start + 250)]
            store.add_samples(run.run_id, 0, batch)
            store.add_samples(run.run_id, 1, [(t0 + i * 0.1, 5, None, 7) for i in range(start, start + 250)])
            assert len(store.samples(run.run_id, 0)) <= 100
        series = store.samples(run.run_id, 0)
        assert 50 <= len(series) <= 100
        assert max(s.rss_bytes for s in series) == 10**9
        assert abs(next(s.time for s in series if s.rss_bytes == 10**9) - (t0 + 333.3)) < 1e-6
        assert series[0].time < t0 + 10 and series[-1].time > t0 + 490
        assert [s.time for s in series] == sorted(s.time for s in series)
        other = store.samples(run.run_id, 1)
        assert len(other) <= 100 and all(s.gpu_bytes == 7 and s.uss_bytes is None for s in other)
        assert store.summary(run.run_id).peak_rss_bytes == 10**9
        with pytest.raises(ConfigError, match="a sample must be"):
            store.add_samples(run.run_id, 0, [(t0, 1)])


def test_workers_events_and_summaries(db: Path) -> None:
    with Store(db) as store:
        run = store.begin_run("r", "m:f", [{}, {}, {}], {})
        store.start_worker(run.run_id, 0, 111, {"threads": 2})
        store.start_worker(run.run_id, 1, 112, {})
        assert store.end_worker(
            run.run_id, 0, reason="killed_memory", detail={"rss_bytes": 2 * 2**30, "limit_bytes": 2**30}
        )
        assert not store.end_worker(run.run_id, 0, reason="shutdown", detail=None)  # already ended
        with pytest.raises(ConfigError, match="not one of"):
            store.end_worker(run.run_id, 1, reason="tired", detail=None)
        _finish(store, run.run_id, 0, value=1)
        _finish(store, run.run_id, 1, value=None, status="failed")
        for i in range(30):
            store.add_event(run.run_id, "recycle", f"event {i}", data={"i": i}, worker_id=0)
        store.finish_run(run.run_id, "failed")
        w0, w1 = store.workers(run.run_id)
        assert w0.reason_text == "killed at the memory limit (2.0 GiB > 1.0 GiB)"
        assert w1.reason is None and w1.config == {}
        last = store.events(run.run_id, limit=5)
        assert [e.message for e in last] == ["event 26", "event 27", "event 28", "event 29", "run failed"]
        (summary,) = store.list_runs()
        assert (summary.trials_ok, summary.trials_failed, summary.trials_pending) == (1, 1, 1)
        assert summary.status == "failed" and summary.workers_started == 2 and summary.peak_rss_bytes == 1001


# -- bad input: each a one-line error with the fix, and nothing stored is lost ------------------------


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_folder_that_does_not_exist_or_is_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist: create it") as err:
        Store(tmp_path / "nope" / "runs.db")
    _one_line(err)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        Store(tmp_path / "afile" / "runs.db")
    with pytest.raises(ConfigError, match="is a folder"):
        Store(tmp_path)


def test_folder_the_kernel_refuses_to_write_even_for_root() -> None:
    # sysfs refuses to create files whatever the permission bits say (root included), so this is a
    # real EACCES from the kernel, not a simulated one.
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no sysfs here")
    with pytest.raises(StoreError, match="not writable: pass a --store in a writable folder") as err:
        Store("/sys/kernel/trainguard-test.db")
    _one_line(err)


def _read_only_bind(folder: Path, code: str) -> subprocess.CompletedProcess:
    script = f'mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && exec {sys.executable} -c "$0"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, code], capture_output=True, text=True, timeout=60
    )


def test_read_only_filesystem_folder(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to mount a read-only bind")
    folder = tmp_path / "ro"
    folder.mkdir()
    with Store(folder / "old.db") as store:
        run = store.begin_run("kept", "m:f", [{}], {})
        _finish(store, run.run_id, 0, value=42)
    code = textwrap.dedent(
        f"""
        from trainguard.store import Store
        from trainguard.exceptions import StoreError
        for name in ("new.db", "old.db"):
            try:
                Store({str(folder)!r} + "/" + name)
                print(name, "opened")
            except StoreError as err:
                print(name, "StoreError", err)
        with Store({str(folder)!r} + "/old.db", readonly=True) as reader:
            print("read", reader.trials(reader.get_run("kept").run_id)[0].value)
        """
    )
    proc = _read_only_bind(folder, code)
    if "mount" in proc.stderr and proc.returncode != 0:
        pytest.skip(f"cannot mount a read-only bind here: {proc.stderr.strip()}")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("new.db StoreError cannot write store") and "writable folder" in lines[0], (
        proc.stderr
    )
    assert lines[1].startswith("old.db StoreError cannot write store"), proc.stdout + proc.stderr
    assert lines[2] == "read 42", proc.stdout + proc.stderr
    with Store(folder / "old.db", readonly=True) as reader:
        assert reader.trials(1)[0].value == 42


def test_file_that_is_not_sqlite_is_refused_and_left_untouched(db: Path) -> None:
    garbage = os.urandom(4096)
    db.write_bytes(garbage)
    for readonly in (False, True):
        with pytest.raises(StoreError, match="not a trainguard store \\(not an SQLite database\\)") as err:
            Store(db, readonly=readonly)
        _one_line(err)
    assert db.read_bytes() == garbage


def test_other_sqlite_database_is_refused(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE photos (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="SQLite database but not a trainguard store"):
        Store(db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("photos",)]
    conn.close()


def test_newer_schema_is_refused_with_an_upgrade_hint(db: Path) -> None:
    from trainguard.store._upgrade import upgrade_advice

    with Store(db) as store:
        run = store.begin_run("kept", "m:f", [{}], {})
        _finish(store, run.run_id, 0, value=7)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError) as err:
            Store(db, readonly=readonly)
        assert _one_line(err) == (
            f"store {db} was written by trainguard schema 7; this trainguard reads schema {SCHEMA_VERSION}: "
            f"{upgrade_advice()} or use another --store"
        )
        assert "pip install -U" not in str(err.value)
        assert err.value.found == 7
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value_json FROM trials").fetchone()[0] == "7"
    conn.close()


def test_the_upgrade_advice_says_where_trainguard_came_from() -> None:
    from trainguard.store._upgrade import advice_for, upgrade_advice

    clone = advice_for({"url": "file:///home/ana/trainguard", "dir_info": {"editable": True}})
    assert clone == (
        "upgrade trainguard in its clone /home/ana/trainguard (git pull there; then pip install -e /home/ana/trainguard)"
    )
    wheel = advice_for({"url": "file:///opt/dist/trainguard-0.1.0-py3-none-any.whl", "archive_info": {}})
    assert "installed from /opt/dist/trainguard-0.1.0-py3-none-any.whl: install a newer wheel" in wheel
    assert "not on a package index" in advice_for(None)
    # this test run's own trainguard: the editable clone the suite runs from
    assert "pip install -U" not in upgrade_advice()


def test_missing_store_for_reading(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at .*missing.db: run something first") as err:
        Store(tmp_path / "missing.db", readonly=True)
    _one_line(err)
    assert not (tmp_path / "missing.db").exists()


def test_the_s_names_are_deprecated_names_of_the_durations(db: Path) -> None:
    with Store(db, sample_resolution="250ms", busy_timeout="3s") as store:
        assert (store._resolution_s, store._busy_timeout_s) == (0.25, 3.0)
    with pytest.warns(DeprecationWarning) as caught:
        with Store(db, sample_resolution_s="250ms", busy_timeout_s="3s") as store:
            assert (store._resolution_s, store._busy_timeout_s) == (0.25, 3.0)
    said = sorted(str(w.message) for w in caught)
    assert said == [
        "busy_timeout_s= is deprecated: use busy_timeout=, which takes the same values",
        "sample_resolution_s= is deprecated: use sample_resolution=, which takes the same values",
    ]
    for new, old in (("sample_resolution", "sample_resolution_s"), ("busy_timeout", "busy_timeout_s")):
        with pytest.raises(
            ConfigError, match=f"give {new}= only: {old}= is its deprecated older name"
        ) as err:
            Store(db, **{new: 1, old: 1})
        _one_line(err)


def test_bad_arguments(db: Path) -> None:
    with pytest.raises(ConfigError, match="max_samples_per_worker"):
        Store(db, max_samples_per_worker=3)
    with pytest.raises(ConfigError, match="sample_resolution"):
        Store(db, sample_resolution="fast")
    with pytest.raises(ConfigError, match="busy_timeout"):
        Store(db, busy_timeout="soon")
    with Store(db) as store:
        with pytest.raises(ConfigError, match="run name"):
            store.begin_run("", "m:f", [], {})
        with pytest.raises(ConfigError, match="params must be a list"):
            store.begin_run("r", "m:f", {"a": 1}, {})
        run = store.begin_run("r", "m:f", [{}], {})
        with pytest.raises(ConfigError, match="attempt status"):
            store.finish_attempt(
                run.run_id, 0, 1, status="weird", error=None, peak_rss_bytes=None, duration_s=None
            )
        with pytest.raises(StoreError, match="no run with id 99"):
            store.finish_run(99, "completed")


def test_sample_envelope_keeps_each_workers_peak_and_bounds_the_count(tmp_path):
    with Store(tmp_path / "s.db", max_samples_per_worker=100_000) as store:
        run = store.begin_run("env", "m:f", [{}], {})
        rows = [(1000.0 + k / 10, 100 + (k % 50), None, None) for k in range(20_000)]
        rows[12_345] = (rows[12_345][0], 9_999, 7, 3)
        store.add_samples(run.run_id, 0, rows)
        store.add_samples(run.run_id, 1, [(1000.0 + k, 200, None, None) for k in range(10)])
        env = store.sample_envelope(run.run_id, buckets=100)
    zero = [s for s in env if s.worker_id == 0]
    assert len(zero) <= 200
    peak = max(zero, key=lambda s: s.rss_bytes)
    assert (peak.time, peak.rss_bytes, peak.uss_bytes, peak.gpu_bytes) == (rows[12_345][0], 9_999, 7, 3)
    assert min(s.rss_bytes for s in zero) == 100
    assert [s.time for s in env] == sorted(s.time for s in env)
    assert {s.rss_bytes for s in env if s.worker_id == 1} == {200}


class _InterruptedAfterBegin:
    """A connection whose BEGIN lands and is then interrupted, as a SIGTERM turned into
    KeyboardInterrupt can be at the next bytecode after the call."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.armed = True

    def execute(self, sql: str, *args):
        cur = self._conn.execute(sql, *args)
        if self.armed and sql.startswith("BEGIN"):
            self.armed = False
            raise KeyboardInterrupt("SIGTERM received")
        return cur

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def test_an_interrupt_right_after_begin_leaves_no_transaction_open(db: Path) -> None:
    # the supervisor's shutdown writes the run's end after the interrupt: an open transaction
    # left by it made every one of those writes fail ("cannot start a transaction within a
    # transaction") and held the database's write lock until the process ended
    with Store(db) as store:
        run = store.begin_run("r", "m:f", [{"a": 1}], {})
        real = store._conn
        store._conn = _InterruptedAfterBegin(real)
        with pytest.raises(KeyboardInterrupt):
            store.finish_run(run.run_id, "completed")
        assert not real.in_transaction
        store.finish_run(run.run_id, "interrupted")
        store._conn = real
    with Store(db, readonly=True) as store:
        assert store.get_run("r").status == "interrupted"
