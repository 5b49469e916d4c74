"""The out-of-memory commands and flags from the command line, in-process through ``main``."""

from __future__ import annotations

import json
from pathlib import Path

from trainguard.cli import main

OOM_TRIALS = str(Path(__file__).parent / "oom_trials.py")


def test_run_on_oom_shrinks(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text(json.dumps([{"batch_size": 32, "fits": 8}]))
    code = main(
        [
            "run",
            f"{OOM_TRIALS}:fits_under",
            "--params",
            str(params),
            "--store",
            str(tmp_path / "s.db"),
            "--on-oom",
            "shrink:batch_size,accumulate=grad_accum",
            "--json",
            "--no-progress",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    (result,) = out["results"]
    assert result["value"]["batch_size"] == 8 and result["value"]["grad_accum"] == 4
    assert result["ran_with"] == {"batch_size": 8, "fits": 8, "grad_accum": 4}


def test_run_on_oom_bad_rules_are_one_line_exit_2(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text(json.dumps([{"batch_size": 32}]))
    base = ["run", f"{OOM_TRIALS}:fits_under", "--params", str(params), "--store", str(tmp_path / "s.db")]
    for rule, needle in [
        ("shrink:batch_size,factor=1.5", "between 0 and 1"),
        ("shrink:bs", "'bs' is not in params[0]"),
        ("shrink:batch_size,minimum=64", "minimum=64 is above the starting batch_size=32"),
        ("grow:batch_size", "not understood"),
    ]:
        assert main([*base, "--on-oom", rule]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "s.db").exists()  # refused before anything was stored
