"""Which runs' history the peak model is fitted on, in real runs on a real store.

Run A of a function holds ``rows`` x 128 Ki elements of float64 (1 MiB a row); run B of the same
function, in the same store, holds float16 (a quarter of that) under a tighter memory limit. The
dtype is a string, which the model cannot use, so A's peaks say B's trials are four times what they
are. A run's model learns from that run alone unless the run names another (``predict_from``), so
B runs every trial that fits; with ``predict_from="A"`` it is predicted from A and says so; a
resumed run keeps what its earlier sessions measured; ``trainguard run --no-predict`` fits no model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard import Policy, Runner
from trainguard.cli import main
from trainguard.exceptions import ConfigError, TrialError
from trainguard.store import Store

HERE = Path(__file__).parent
FN = f"{HERE / 'scope_trials.py'}:rows"
FN_OR_FAIL = f"{HERE / 'scope_trials.py'}:rows_or_fail"
MiB = 2**20

#: run A: 100 to 350 MiB of float64 (with the worker's own ~45 MiB, all under its 2 GB limit)
BIG = [{"rows": r, "dtype": "float64"} for r in (100, 150, 200, 250, 300, 350)]
#: run B: 50 to 138 MiB of float16 under 300 MB; A's model puts rows >= 250 over 300 MB
SMALL = [{"rows": r, "dtype": "float16"} for r in (200, 250, 300, 350, 400, 450, 500, 550)]


def _status(result) -> str:
    return "ok" if result.ok else result.error.status


def _run_a(store: Path) -> None:
    with Runner(workers=1, store=store, policy=Policy(memory_limit="2GB")) as runner:
        assert all(r.ok for r in runner.map(FN, BIG, name="A"))


def _events(store: Path, name: str, kind: str) -> list:
    with Store(store, readonly=True) as s:
        return [e for e in s.events(s.get_run(name).run_id) if e.kind == kind]


@pytest.mark.slow
def test_another_run_of_the_same_code_does_not_skip_this_runs_trials(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    _run_a(store)
    with Runner(workers=1, store=store, policy=Policy(memory_limit="300MB")) as runner:
        results = runner.map(FN, SMALL, name="B")
    # before: rows >= 300 were "predicted_over_limit" from A's float64 peaks, though they fit
    assert [_status(r) for r in results] == ["ok"] * len(SMALL)
    assert max(r.peak_rss_bytes for r in results) < 300e6
    assert _events(store, "B", "peak_skip") == []
    models = _events(store, "B", "peak_model")
    assert models and all("run 'A'" not in e.message for e in models)
    assert all(set((e.data or {}).get("runs", {})) <= {"B"} for e in models)


@pytest.mark.slow
def test_predict_from_fits_on_the_named_run_and_a_skip_says_which(tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs.db"
    _run_a(store)
    with Runner(workers=1, store=store, policy=Policy(memory_limit="300MB")) as runner:
        results = runner.map(FN, SMALL, name="B", predict_from="A")
    skipped = [r for r in results if _status(r) == "predicted_over_limit"]
    # what A's float64 trials predict: every trial from 300 rows up over 300 MB
    assert {r.params["rows"] for r in skipped} >= {300, 350, 400, 450, 500, 550}, [
        _status(r) for r in results
    ]
    for r in skipped:
        assert r.attempts == 0
        assert "run 'A' (6 trials)" in r.error.message, r.error.message
        assert r.error.prediction["runs"]["A"] == 6
    with Store(store, readonly=True) as s:
        run = s.get_run("B")
        assert run.config["predict_from"] == "A"
        kept = s.predictions(run.run_id)
    assert all("run 'A'" in kept[r.index]["reason"] for r in skipped)
    # show: each skipped trial's line says which run's history predicted it
    assert main(["show", "B", "--store", str(store), "--max-trials", "20"]) == 0
    text = capsys.readouterr().out
    assert "(not run)" in text and "run 'A' (6 trials)" in text


@pytest.mark.slow
def test_a_resumed_run_keeps_what_its_earlier_sessions_measured(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    params = [
        *BIG,
        {"rows": 1, "dtype": "int8", "fail": True},
        *({"rows": r, "dtype": "float64"} for r in (600, 700)),
    ]
    first = Runner(workers=1, store=store, policy=Policy(memory_limit="2GB", on_error="stop"))
    with first, pytest.raises(TrialError):
        first.map(FN_OR_FAIL, params, name="C")  # stops at the failing trial, before 600 and 700
    with Runner(workers=1, store=store, policy=Policy(memory_limit="300MB")) as runner, pytest.warns(Warning):
        results = runner.map(FN_OR_FAIL, params, name="C")
    last = {r.params["rows"]: r for r in results if r.params["dtype"] == "float64"}
    # the first session's six float64 peaks predict 600 and 700 rows far over 300 MB: not started
    assert _status(last[600]) == _status(last[700]) == "predicted_over_limit"
    assert "this run (6 trials)" in last[700].error.message


@pytest.mark.slow
def test_the_cli_predicts_from_a_named_run_or_not_at_all(tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs.db"
    _run_a(store)
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(SMALL))
    base = ["run", FN, "--params", str(grid), "--store", str(store), "--memory-limit", "300MB", "--json"]
    assert main([*base, "--name", "B1", "--predict-from", "A"]) == 1  # trials skipped: failed
    seeded = json.loads(capsys.readouterr().out)["results"]
    assert [r["error"]["status"] for r in seeded if r["error"]].count("predicted_over_limit") >= 6
    # this run's own first eight trials predict its last far over the limit; --no-predict fits no model
    own = [{"rows": r, "dtype": "float64"} for r in (20, 40, 60, 80, 100, 120, 140, 160, 600)]
    grid.write_text(json.dumps(own))
    assert main([*base, "--name", "own"]) == 1
    statuses = [
        r["error"]["status"] if r["error"] else "ok" for r in json.loads(capsys.readouterr().out)["results"]
    ]
    assert statuses == ["ok"] * 8 + ["predicted_over_limit"]
    assert main([*base, "--name", "off", "--no-predict"]) == 1
    statuses = [
        r["error"]["status"] if r["error"] else "ok" for r in json.loads(capsys.readouterr().out)["results"]
    ]
    assert statuses == ["ok"] * 8 + ["killed_memory"]  # it ran, and the limit ended it
    with Store(store, readonly=True) as s:
        off = s.get_run("off")
        assert not s.has_predictions(off.run_id)
        assert off.config["policy"]["predict_peaks"] is False
        assert [e for e in s.events(off.run_id) if e.kind.startswith("peak_")] == []


def test_an_unknown_run_is_refused_before_the_store_is_written(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    with Store(store) as s:
        s.finish_run(s.begin_run("A", FN, [{"rows": 1}], {}).run_id, "completed")
    with Runner(workers=1, store=store) as runner, pytest.raises(ConfigError) as info:
        runner.map(FN, SMALL, name="B", predict_from="a")
    assert str(info.value) == (
        f"predict_from='a' is not a run in {store} (its runs: 'A'): `trainguard runs --store {store}` lists them"
    )
    with Store(store, readonly=True) as s:
        assert s.run_names() == ["A"]
