"""The peak model in a real run: trials predicted over the memory limit are not started (or start
shrunk), each trial records its prediction, and the store keeps the model for the next run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from trainguard import Policy, Runner, Shrink
from trainguard.store import Store

HERE = Path(__file__).parent
FN = f"{HERE / 'peak_trials.py'}:activations"
MiB = 2**20


def _grid(seed: int = 0, repeats: int = 2) -> list[dict]:
    grid = [
        {"width": w, "batch_size": b, "seed": s}
        for w in (8, 16, 32, 64, 128)
        for b in (16, 32, 64, 128, 256)
        for s in range(repeats)
    ]
    random.Random(seed).shuffle(grid)
    return grid


def _status(result) -> str:
    return "ok" if result.ok else result.error.status


@pytest.mark.slow
def test_trials_predicted_over_the_limit_are_not_started(tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs.db"
    grid = _grid(seed=0)
    runner = Runner(workers=1, policy=Policy(memory_limit="460MB"), store=store)
    results = runner.map(FN, grid, name="peaks")
    statuses = [_status(r) for r in results]
    # 512 MiB of activations or more, with the worker's own ~80 MiB, is over 460 MB
    over = [p for p in grid if p["width"] * p["batch_size"] * 32768 >= 512 * MiB]
    # the big configs are found by a kill at most twice (before the model knows), the rest skipped
    assert statuses.count("killed_memory") <= 2, statuses
    assert statuses.count("predicted_over_limit") >= len(over) - 2
    assert statuses.count("ok") == len(grid) - len(over)
    skipped = [r for r in results if _status(r) == "predicted_over_limit"]
    for r in skipped:
        assert r.attempts == 0 and r.peak_rss_bytes is None
        assert r.error.prediction["low_bytes"] > 460e6
        assert "over memory_limit" in r.error.message
    # every trial after the first few carries its prediction, within 20 % of what it measured
    late = [r for r in results if r.ok and r.predicted_peak_bytes]
    assert len(late) >= len(grid) - len(over) - 8
    errors = sorted(abs(r.predicted_peak_bytes - r.peak_rss_bytes) / r.peak_rss_bytes for r in late)
    assert errors[len(errors) // 2] < 0.20
    with Store(store, readonly=True) as s:
        run = s.get_run("peaks")
        predictions = s.predictions(run.run_id)
        kinds = [e.kind for e in s.events(run.run_id)]
    assert {i for i, p in predictions.items() if p["acted"] == "skipped"} == {r.index for r in skipped}
    assert "peak_model" in kinds and "peak_skip" in kinds
    # show: each trial's prediction, and the model's story in its own table
    from trainguard.cli import main

    assert main(["show", "peaks", "--store", str(store), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {int(k) for k, p in payload["predictions"].items() if p["acted"] == "skipped"} == {
        r.index for r in skipped
    }
    assert not any(row["kind"].startswith("peak_") for row in payload["out_of_memory"])
    assert main(["show", "peaks", "--store", str(store), "--max-trials", "100"]) == 0
    text = capsys.readouterr().out
    assert "peak model" in text and "(not run)" in text
    # the HTML report: each trial's prediction beside its measured peak, and a line for those not run
    import re

    out = tmp_path / "peaks.html"
    assert main(["report", "peaks", "--store", str(store), "-o", str(out)]) == 0
    page = out.read_text()
    data = json.loads(
        re.search(r'<script type="application/json" id="tg-data">(.*?)</script>', page, re.S).group(1)
    )
    table = data["tables"]["trials"]
    labels = [c["label"] for c in table["columns"]]
    assert labels[labels.index("peak RSS") + 1 : labels.index("peak RSS") + 3] == [
        "predicted peak",
        "predicted 95 %",
    ]
    rows = {row[0]: dict(zip(labels, row, strict=True)) for row in table["rows"]}
    for index, prediction in predictions.items():
        row = rows[index]
        assert row["predicted peak"] == prediction["peak_bytes"]
        if prediction["peak_bytes"] is not None:
            assert " to " in row["predicted 95 %"]
        assert row["predicted 95 %"].endswith("(not run)") == (prediction["acted"] == "skipped")
    note = re.search(r'<p class="note" id="not-started">(.*?)</p>', page).group(1)
    assert note.startswith(f"{len(skipped)} trial") and "not started (predicted over limit)" in note
    assert "memory_limit=438.7 MiB" in note  # 460 MB
    models = [e["data"] for e in payload["peak_model"] if e["kind"] == "peak_model"]
    assert "seed" in models[-1]["ignored"] and "seed" not in models[-1]["features"]
    # a later runner on the same store answers for params not yet run
    answer = Runner(workers=1, store=store).predict_peak(FN, {"width": 256, "batch_size": 256, "seed": 0})
    # (width 256 x batch 256 is 2 GiB of activations, four times what any trial that fit held: an
    # extrapolation whose low end must say "over the limit", by a margin the fit's noise keeps)
    assert answer.known and answer.low_bytes > 2 * 460e6, answer


@pytest.mark.slow
def test_with_shrink_the_big_configs_start_at_a_size_that_fits(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    grid = _grid(seed=2, repeats=1)
    policy = Policy(memory_limit="460MB", on_oom=Shrink("batch_size", minimum=4))
    results = Runner(workers=1, policy=policy, store=store).map(FN, grid, name="shrunk")
    assert all(r.ok for r in results), [(_status(r), r.params) for r in results if not r.ok]
    started_small = [r for r in results if r.ran_with and r.ran_with["batch_size"] < r.params["batch_size"]]
    assert started_small, "no trial was shrunk"
    with Store(store, readonly=True) as s:
        run = s.get_run("shrunk")
        events = s.events(run.run_id)
    kills = [e for e in events if e.kind == "kill"]
    starts = [e for e in events if e.kind == "peak_start"]
    assert starts and len(kills) <= 2, [e.message for e in kills]


def test_predict_peak_before_any_trial_is_unknown(tmp_path: Path) -> None:
    answer = Runner(workers=1, store=tmp_path / "runs.db").predict_peak(FN, {"width": 8, "batch_size": 8})
    assert not answer.known and "finished trials" in answer.reason
