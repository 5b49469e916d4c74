"""``trainguard runs`` and ``trainguard show`` on a store filled directly through the Store API."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _waits import process_starts
from trainguard.cli import main
from trainguard.outcomes import Failure
from trainguard.store import Store


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    t0 = time.time()
    with Store(path) as s:
        run = s.begin_run(
            "lr-sweep", "train.py:train", [{"lr": 10.0**-i} for i in range(1, 6)], {"workers": 1}
        )
        s.start_worker(run.run_id, 0, 4101, {"threads": 2})
        for i in range(3):
            s.start_attempt(run.run_id, i, 1, 0)
            s.add_samples(
                run.run_id,
                0,
                [(t0 + i + k / 10, 600_000_000 + i * 56_000_000 + k, None, None) for k in range(10)],
            )
            s.finish_attempt(
                run.run_id, i, 1, status="ok", error=None, peak_rss_bytes=700_000_000, duration_s=1.5
            )
            s.finish_trial(
                run.run_id,
                i,
                status="ok",
                value={"loss": 0.5 - i / 10},
                error=None,
                attempts=1,
                peak_rss_bytes=600_000_000 + i * 56_000_000,
                worker_id=0,
                duration_s=1.5,
            )
        s.end_worker(run.run_id, 0, reason="recycled", detail={"trials": 3})
        s.start_worker(run.run_id, 1, 4102, {})
        s.start_attempt(run.run_id, 3, 1, 1)
        s.finish_attempt(
            run.run_id,
            3,
            1,
            status="killed_memory",
            error=Failure("killed_memory", "", exc_type="MemoryLimitError"),
            peak_rss_bytes=1_300_000_000,
            duration_s=2.0,
        )
        s.end_worker(
            run.run_id, 1, reason="killed_memory", detail={"rss_bytes": 1_300_000_000, "limit_bytes": 2**30}
        )
        s.finish_trial(
            run.run_id,
            3,
            status="failed",
            value=None,
            error=Failure("killed_memory", "killed at 1.2 GiB > limit 1.0 GiB", exc_type="MemoryLimitError"),
            attempts=1,
            peak_rss_bytes=1_300_000_000,
            worker_id=1,
            duration_s=2.0,
        )
        s.add_event(run.run_id, "recycle", "worker 0 recycled after 3 trials", worker_id=0)
        s.finish_run(run.run_id, "failed")
        s.begin_run("seeds [x]", "m:f", [{"seed": 1}], {})
    return path


def test_runs_table(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--store", str(filled)]) == 0
    out = capsys.readouterr().out
    sweep = next(line for line in out.splitlines() if "lr-sweep" in line)
    cells = [c.strip() for c in sweep.split("│")[1:-1]]
    assert cells[:5] == ["lr-sweep", "failed", "3", "1", "1"]
    assert cells[-1] == "1.2 GiB"
    assert "seeds [x]" in out  # rich markup in a name is printed, not interpreted


def test_runs_json(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--store", str(filled), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = data["runs"][0]
    assert (first["name"], first["trials_ok"], first["trials_failed"], first["trials_pending"]) == (
        "lr-sweep",
        3,
        1,
        1,
    )
    assert first["peak_rss_bytes"] == 1_300_000_000 and first["workers_started"] == 2


def test_show_text(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "lr-sweep", "--store", str(filled)]) == 0
    out = capsys.readouterr().out
    assert "trials: 5 (3 ok, 1 failed, 1 pending)" in out
    assert "loss=0.4" in out and "MemoryLimitError: killed at 1.2 GiB > limit 1.0 GiB" in out
    assert "recycled by policy (after 3 trials)" in out
    assert "killed at the memory limit (1.2 GiB > 1.0 GiB)" in out
    assert "worker 0 recycled after 3 trials" in out
    assert "▁" in out and "█" in out  # the memory sparkline


def test_show_prints_each_pool_event_once(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the pool's events (workers, threads, the budget) have their own table: the recent events
    # list leaves them out, so each is printed once, while the other events stay in it
    with Store(filled) as s:
        run_id = s.get_run("lr-sweep").run_id
        s.add_event(run_id, "workers", "2 workers: budget 2.0 GiB / (673 MiB measured peak) = 2.61")
        s.add_event(run_id, "budget_kill", "worker 3 killed at the memory budget: summed 2.1 GiB > 2.0 GiB")
        s.add_event(run_id, "retry", "trial 4 attempt 1 ended with killed_budget; retrying")
    assert main(["show", "lr-sweep", "--store", str(filled)]) == 0
    out = capsys.readouterr().out
    assert out.count("2 workers: budget 2.0 GiB") == 1
    assert out.count("worker 3 killed at the memory budget") == 1
    assert out.count("trial 4 attempt 1 ended with killed_budget") == 1
    assert out.index("trial 4 attempt 1") < out.index("workers, threads and the memory budget")
    assert out.index("worker 3 killed at the memory budget") > out.index(
        "workers, threads and the memory budget"
    )
    assert main(["show", "lr-sweep", "--store", str(filled), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["kind"] for e in data["pool"]] == ["workers", "budget_kill"]
    assert "retry" in [e["kind"] for e in data["events"]] and "workers" not in [
        e["kind"] for e in data["events"]
    ]


def test_show_json_and_by_id(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "1", "--store", str(filled), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["name"] == "lr-sweep"
    assert [t["status"] for t in data["trials"]] == ["ok", "ok", "ok", "failed", "pending"]
    assert [w["reason"] for w in data["workers"]] == ["recycled", "killed_memory"]
    assert data["workers"][1]["reason_text"].startswith("killed at the memory limit")
    assert data["memory"]["peak_rss_bytes"] == 600_000_000 + 2 * 56_000_000 + 9


def test_show_unknown_run_is_a_one_line_usage_error(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "nope", "--store", str(filled)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert (
        "no run named 'nope'" in err and "known runs: lr-sweep, seeds [x]" in err and "trainguard runs" in err
    )


def test_missing_store_is_a_one_line_error_and_creates_nothing(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nothing.db"
    for argv in (["runs", "--store", str(missing)], ["show", "x", "--store", str(missing)]):
        assert main(argv) == 4  # a store error has its own exit code
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "no store at" in err and "--store" in err
    assert not missing.exists()


def test_not_a_store_and_empty_store(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, this is not a database at all\n" * 10)
    assert main(["runs", "--store", str(bad)]) == 4
    assert "not a trainguard store" in capsys.readouterr().err
    empty = tmp_path / "empty.db"
    Store(empty).close()
    assert main(["runs", "--store", str(empty)]) == 0
    assert "no runs in" in capsys.readouterr().out


def test_console_entry_point(filled: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trainguard", "runs", "--store", str(filled), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"][1]["name"] == "seeds [x]"


def test_demo_rejects_bad_input_before_any_work(tmp_path: Path, capsys) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00\x01not sqlite" * 100)
    with process_starts() as started:
        assert main(["demo", "--trials", "1"]) == 2
        assert "trials must be an int >= 2" in capsys.readouterr().err
        assert main(["demo", "--trials", "2", "--store", str(tmp_path / "no" / "such" / "demo.db")]) == 2
        assert "does not exist: create it" in capsys.readouterr().err
        assert main(["demo", "--trials", "2", "--store", str(garbage)]) == 4
        assert "not a trainguard store" in capsys.readouterr().err
    assert not started, f"errors must come before the demo starts any fit; it started {started}"
