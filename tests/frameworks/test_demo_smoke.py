"""``trainguard demo --trials 2`` end to end: a real TensorFlow child, a real Runner worker, a real store."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.store import Store

# find_spec rather than importorskip: this test checks that the demo's own process never imports
# TensorFlow, so the test process must not import it either.
if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
    pytest.skip("needs tensorflow and keras (pip install 'trainguard[demo]')", allow_module_level=True)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_demo_two_trials_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "demo.db"
    assert main(["demo", "--trials", "2", "--store", str(store), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for half in ("naive", "runner"):
        part = data[half]
        assert part["trials"] == 2 and part["failed"] == 0
        assert all(v["backend"] == "tensorflow" and 0 <= v["accuracy"] <= 1 for v in part["values"])
        # a TF process that ran a fit holds hundreds of MB: a reading of a few MB would mean the
        # sampler watched the wrong process
        assert all(p > 200 * 2**20 for p in part["trial_peak_rss_bytes"])
        assert part["peak_rss_bytes"] >= max(part["trial_peak_rss_bytes"])
    assert "tensorflow" not in sys.modules and "keras" not in sys.modules, (
        "the demo's process must stay framework-free"
    )
    with Store(store, readonly=True) as reader:
        (summary,) = reader.list_runs()
        assert summary.name == data["runner"]["run_name"]
        assert (summary.trials_ok, summary.status) == (2, "completed")
        assert reader.samples(summary.run_id), "the runner's outside samples reach the store"
