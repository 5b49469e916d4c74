"""find_batch_size and `trainguard fit`: probes in fresh workers under a hard limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.exceptions import ConfigError, DoesNotFitError, TrialError
from trainguard.fitting import find_batch_size
from trainguard.runner import Policy, Runner, Shrink

OOM_TRIALS = str(Path(__file__).parent / "oom_trials.py")
FIT = "trainguard.workloads:numpy_fit"


@pytest.mark.slow
def test_the_size_found_fits_under_the_margin_and_twice_it_does_not_fit(tmp_path):
    limit = 350_000_000
    result = find_batch_size(
        FIT, {"batch_size": 256}, memory_limit=limit, margin=0.1, store=tmp_path / "s.db"
    )
    size = result.size
    assert result.peak_rss_bytes <= limit * 0.9 and result.budget_bytes == int(limit * 0.9)
    by_size = {p.size: p for p in result.probes}
    assert by_size[size].fits and all(
        p.fits == (p.status == "ok" and p.peak_rss_bytes <= limit * 0.9) for p in result.probes
    )
    # the bracket is tight: a probe within 5 % above the size did not fit
    assert any(not p.fits and size < p.size <= size * 1.05 + 1 for p in result.probes)
    # twice the size, alone in a fresh worker, crosses the limit
    policy = Policy(memory_limit=limit, peak_ratio=None)
    with Runner(policy=policy, store=None, sample_interval="20ms") as runner:
        (double,) = runner.map(FIT, [{"batch_size": 2 * size, "steps": 1}])
    assert double.status == "failed" and double.error.status == "killed_memory"
    assert result.stored and "probes" in result.summary()


def test_probes_see_the_flag_and_the_stored_size_is_where_a_shrink_run_starts(tmp_path):
    store = tmp_path / "s.db"
    params = {"batch_size": 8, "fits": 40}
    flagged = find_batch_size(f"{OOM_TRIALS}:probe_aware", params, memory_limit="2GB", maximum=8, store=None)
    assert flagged.size == 8 and flagged.capped  # probe_aware raises unless probing() is true
    result = find_batch_size(f"{OOM_TRIALS}:fits_under", params, memory_limit="2GB", tolerance=0, store=store)
    assert result.size == 40 and [p.size for p in result.probes][:4] == [8, 16, 32, 64]
    assert [p.status for p in result.probes if not p.fits] == ["framework_oom"] * len(
        [p for p in result.probes if not p.fits]
    )
    policy = Policy(memory_limit="2GB", on_oom=Shrink("batch_size"), peak_ratio=None)
    with Runner(policy=policy, store=store) as runner:
        (run,) = runner.map(f"{OOM_TRIALS}:fits_under", [{"batch_size": 64, "fits": 40}], name="after-fit")
        events = runner.store.events(runner.store.get_run("after-fit").run_id)
    assert run.ok and run.attempts == 1 and run.value["batch_size"] == 40
    assert any(e.kind == "oom_start" and "(fit)" in e.message for e in events)


def test_even_the_minimum_not_fitting_says_so_with_its_peak(tmp_path):
    with pytest.raises(DoesNotFitError) as info:
        find_batch_size(
            f"{OOM_TRIALS}:fits_under", {"batch_size": 4, "fits": 0}, memory_limit="2GB", store=None
        )
    message = str(info.value)
    assert "even batch_size=1 does not fit" in message and "peak of" in message and "MiB" in message
    assert info.value.size == 1 and info.value.peak_bytes > 0 and "\n" not in message


def test_a_probe_failing_for_another_reason_is_a_trial_error(tmp_path):
    with pytest.raises(TrialError, match="not out of memory: fix the trial function"):
        find_batch_size(f"{OOM_TRIALS}:broken", {"batch_size": 4}, memory_limit="2GB", store=None)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({}, "needs a hard limit"),
        ({"memory_limit": "1GB", "margin": 1.0}, "margin=1.0"),
        ({"memory_limit": "1GB", "params": {"batch_size": 2.5}}, "must be a whole number"),
        ({"memory_limit": "1GB", "params": {"batch_size": 4}, "minimum": 8}, "minimum=8 is above"),
        ({"memory_limit": "1GB", "params": {"batch_size": 64}, "maximum": 8}, "maximum=8 is below"),
        ({"memory_limit": "lots"}, "memory_limit"),
    ],
)
def test_bad_input_is_refused_before_any_probe(kwargs, needle):
    kwargs = {"params": {"batch_size": 4}, **kwargs}
    with pytest.raises(ConfigError) as info:
        find_batch_size(
            f"{OOM_TRIALS}:broken", store=None, **kwargs
        )  # broken: a probe would raise TrialError
    assert needle in str(info.value)


def test_fit_cli_json_and_errors(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"fits": 12}))
    args = [
        "fit",
        f"{OOM_TRIALS}:fits_under",
        "--params",
        str(params),
        "--start",
        "4",
        "--memory-limit",
        "2GB",
    ]
    assert main([*args, "--tolerance", "0", "--json", "--no-store"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["size"] == 12 and out["probes"][0]["size"] == 4 and out["stored"] is False
    assert main([*args, "--minimum", "8"]) == 2
    err = capsys.readouterr().err
    assert "minimum=8 is above the starting batch_size=4" in err and len(err.strip().splitlines()) == 1
    params.write_text(json.dumps({"fits": 0}))
    assert main([*args, "--no-store"]) == 1  # DoesNotFitError: the search failed (exit 1)
    err = capsys.readouterr().err
    assert "even batch_size=1 does not fit" in err
