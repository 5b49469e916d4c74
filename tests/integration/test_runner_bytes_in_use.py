"""The runner records its worker's C allocator bytes in use after each trial, and `show` says
whether they rose: a trial that keeps 4 MiB of malloc'd memory, one that frees it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.probes.allocator import AllocatorProbe
from trainguard.runner import Policy, Runner

TRIALS = str(Path(__file__).with_name("bytes_in_use_trials.py"))
MIB = 2**20

pytestmark = pytest.mark.skipif(
    not AllocatorProbe().available, reason="this platform's allocator has no bytes-in-use count"
)


def test_bytes_in_use_rise_with_a_native_leak_and_stay_flat_without(tmp_path, capsys):
    store = tmp_path / "r.db"
    with Runner(workers=1, policy=Policy(peak_ratio=None), store=store) as runner:
        runner.map(f"{TRIALS}:keep_native", [{"mib": 4}] * 6, name="leaks")
        runner.map(f"{TRIALS}:native_temporary", [{"mib": 4}] * 6, name="flat")
    assert main(["show", "leaks", "--store", str(store), "--json"]) == 0
    leaks = json.loads(capsys.readouterr().out)["bytes_in_use"]
    assert main(["show", "flat", "--store", str(store), "--json"]) == 0
    flat = json.loads(capsys.readouterr().out)["bytes_in_use"]
    (worker,) = leaks["workers"]
    steps = [b - a for a, b in zip(worker["bytes_in_use"], worker["bytes_in_use"][1:], strict=False)]
    # exact but for the bookkeeping of the trial's own Python objects: a few KiB either way
    assert len(steps) == 5 and all(abs(s - 4 * MIB) < 256 * 1024 for s in steps), steps
    assert worker["trend"]["status"] == "rises"
    assert worker["trend"]["per_trial_bytes"] == pytest.approx(4 * MIB, rel=0.05)
    (still,) = flat["workers"]
    assert still["trend"]["status"] == "flat", still
    assert max(still["bytes_in_use"]) - min(still["bytes_in_use"]) < 1 * MIB
    assert main(["show", "leaks", "--store", str(store)]) == 0
    text = capsys.readouterr().out
    assert "bytes in use after each trial" in text and "over 6 trials" in text
    assert "/trial (the worker's native memory grows)" in text
    assert main(["show", "flat", "--store", str(store)]) == 0
    assert "(flat)" in capsys.readouterr().out
