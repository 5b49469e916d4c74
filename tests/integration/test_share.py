"""trainguard.share: arrays written once, memory-mapped read-only by every worker, charged to no
worker's private memory, and never left behind: not after a run, not after a supervisor SIGKILL."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import trainguard
from _waits import wait_for
from trainguard.exceptions import ConfigError, SharedDataError
from trainguard.runner import Runner
from trainguard.runner._shared import PREFIX, SHM_FOLDER, sweep_stale
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = str(HERE / "stage_trials.py")
MiB = 2**20


def _mine(pid: int | None = None) -> list[str]:
    pid = os.getpid() if pid is None else pid
    found = []
    for folder in (SHM_FOLDER, "/tmp"):
        try:
            found += [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(f"{PREFIX}{pid}-")]
        except OSError:
            pass
    return found


def test_share_writes_once_and_maps_read_only():
    x = np.arange(1000, dtype=np.float32).reshape(100, 10)
    y = np.arange(100, dtype=np.int64)
    with trainguard.share({"x": x, "y": y}) as data:
        assert data.location == ("shm" if os.path.isdir(SHM_FOLDER) else "disk")
        assert sorted(os.listdir(data.path)) == ["x.npy", "y.npy"]
        assert isinstance(data["x"], np.memmap) and not data["x"].flags.writeable
        np.testing.assert_array_equal(data["x"], x)
        np.testing.assert_array_equal(data["y"], y)
        copy = pickle.loads(pickle.dumps(data))  # crosses to a worker as its path only
        assert len(pickle.dumps(data)) < 500 and copy.path == data.path
        np.testing.assert_array_equal(copy["y"], y)
        path = data.path
    assert not os.path.exists(path)
    single = trainguard.share(y)
    np.testing.assert_array_equal(single.array, y)
    single.close()
    single.close()  # idempotent


def test_workers_attach_without_copies_and_nothing_is_left(tmp_path):
    x = np.random.default_rng(0).random((2048, 1024), dtype=np.float32)  # 8 MiB
    with Runner(workers=2, store=tmp_path / "s.db") as runner:
        results = runner.map(TRIALS + ":read_shared", [{"sleep_s": 0.5}] * 4, data={"x": x})
        events = runner.store.events(runner.store.get_run(runner._last_run).run_id)
    assert all(r.ok for r in results), [r.error for r in results]
    assert {r.value["sum"] for r in results} == {float(x.sum(dtype=np.float64))}
    assert all(r.value["memmap"] and not r.value["writable"] for r in results)
    assert len({r.value["pid"] for r in results}) == 2
    assert any(e.kind == "memory_accounting" for e in events)
    # arrays given to map directly are the run's: removed when it ends
    assert not os.path.exists(results[0].value["path"]) and not _mine()


def test_shared_pages_are_not_charged_to_each_worker(tmp_path):
    x = np.ones((64 * MiB // 4,), dtype=np.float32)  # 64 MiB
    with trainguard.share({"x": x}) as data, Runner(store=tmp_path / "s.db") as runner:
        touched, copied = runner.map(
            TRIALS + ":read_shared",
            [{"touch": True, "sleep_s": 0.5}, {"copy": True, "sleep_s": 0.5}],
            data=data,
        )
        idle = runner.map(TRIALS + ":read_shared", [{"touch": False}], data=data, name="idle")[0]
    assert touched.ok and copied.ok and idle.ok
    # reading all 64 MiB of shared pages leaves the worker's charged (private) memory where an idle
    # trial's is; a private copy of the same array is charged in full
    assert touched.peak_rss_bytes < idle.peak_rss_bytes + 24 * MiB
    assert copied.peak_rss_bytes > touched.peak_rss_bytes + 48 * MiB


def test_a_killed_supervisor_leaves_files_the_next_run_removes(tmp_path):
    script = tmp_path / "supervisor.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, numpy as np
            sys.path.insert(0, {str(HERE)!r})
            import trainguard
            data = trainguard.share({{"x": np.ones(1 << 20, dtype=np.float32)}})
            print(data.path, flush=True)
            with trainguard.Runner(store={str(tmp_path / "k.db")!r}) as runner:
                runner.map({TRIALS + ":read_shared"!r}, [{{"sleep_s": 60}}], data=data)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    assert os.path.isdir(path)

    def trial_started() -> bool:
        with Store(tmp_path / "k.db", readonly=True) as store:
            (run,) = store.list_runs()
            return bool(store.attempts(run.run_id))

    # killed while its trial reads the shared folder; the store not made yet is "not yet"
    wait_for(trial_started, 60, "the trial to start", ignore=(Exception,))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert os.path.isdir(path)  # nothing could run in the killed process
    # the next run (or share) removes what the dead supervisor left; a live owner's folder stays
    with trainguard.share({"x": np.zeros(3)}) as live:
        with Runner(store=tmp_path / "s.db") as runner:
            assert runner.map(TRIALS + ":draws", [{}])[0].ok
        assert not os.path.exists(path)
        assert os.path.isdir(live.path) and sweep_stale() == []


@pytest.mark.parametrize(
    "arrays, needle",
    [
        ([1, 2, 3], "not a list: convert it first"),
        ({"x": [1, 2]}, "'x' is a list, not a numpy array"),
        (np.array([{}, 1], dtype=object), "dtype object"),
        ({"bad name/..": np.zeros(2)}, "cannot name a file"),
        ({}, "nothing to share"),
    ],
)
def test_bad_input_is_one_line(arrays, needle):
    with pytest.raises(ConfigError) as err:
        trainguard.share(arrays)
    assert needle in str(err.value).replace("a list", "not a list") or needle in str(err.value)
    assert "\n" not in str(err.value)


def test_more_than_the_free_space_says_how_much(tmp_path):
    huge = np.broadcast_to(np.zeros(1, dtype=np.float64), (10**13,))  # 80 TB that takes no memory
    with pytest.raises(SharedDataError) as err:
        trainguard.share({"x": huge})
    text = str(err.value)
    assert "needs 72.8 TiB" in text and "free" in text and "\n" not in text
    assert err.value.needed_bytes > 10**13
    with pytest.raises(ConfigError, match="not a numpy array"):
        Runner(store=None).map(TRIALS + ":read_shared", [{}], data={"x": "nope"})


def test_shapes_come_back_as_they_went_in():
    """A 0-d array stays 0-d (np.ascontiguousarray made it shape (1,)); Fortran order keeps its values."""
    with trainguard.share({"s": np.array(3.5), "f": np.asfortranarray(np.arange(6.0).reshape(2, 3))}) as data:
        assert data["s"].shape == () and float(data["s"]) == 3.5
        assert data["f"].shape == (2, 3) and data["f"][1, 2] == 5.0
        with Runner(store=None) as runner:
            [result] = runner.map(TRIALS + ":shared_shapes", [{}], data=data)
        assert result.value == {"s": [], "f": [2, 3]}


def test_a_write_that_fails_midway_is_the_modules_own_error(tmp_path):
    """numpy reports a short write as ``OSError: N requested and M written`` (no errno): the file
    size limit here fails the write the way a disk filling up meanwhile does. share() says so in
    its own one-line error, and leaves no folder behind."""
    script = textwrap.dedent(
        f"""
        import resource, signal, numpy as np, trainguard
        from trainguard.exceptions import SharedDataError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            trainguard.share({{"x": np.zeros(1_000_000)}}, folder={str(tmp_path)!r})
        except SharedDataError as err:
            print("SharedDataError:", err)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("SharedDataError: share() failed (1000000 requested and"), line
    assert "7.6 MiB to " + str(tmp_path) in line and "\n" not in line
    assert os.listdir(tmp_path) == []
