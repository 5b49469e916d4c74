"""``trainguard demo --trials 2`` end to end: a real TensorFlow child, a real Runner worker, a real store."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.store import Store

if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
    pytest.skip("needs tensorflow and keras (pip install -e '.[demo]')", allow_module_level=True)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_demo_two_trials_json(tmp_path: Path) -> None:
    store = tmp_path / "demo.db"
    # Run in a fresh interpreter: other test modules in this pytest process import TensorFlow, and
    # this test checks that the demo's own process never does.
    code = (
        "import sys; from trainguard.cli import main; "
        f"rc = main(['demo', '--trials', '2', '--store', {str(store)!r}, '--json']); "
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'demo imported a framework'; "
        "sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    # per-trial progress on stderr, so a half of a minute or more is never silent
    for half in ("naive", "Runner"):
        assert f"{half} trial 1/2:" in proc.stderr and f"{half} trial 2/2:" in proc.stderr, proc.stderr
    for half in ("naive", "runner"):
        part = data[half]
        assert part["trials"] == 2 and part["failed"] == 0
        assert all(v["backend"] == "tensorflow" and 0 <= v["accuracy"] <= 1 for v in part["values"])
        # a TF process that ran a fit holds hundreds of MB: a reading of a few MB would mean the
        # sampler watched the wrong process
        assert all(p > 200 * 2**20 for p in part["trial_peak_rss_bytes"])
        # the half's peak is its own sampler's highest reading or a trial's: with two trials in one
        # process (one worker) it is the highest trial's, give or take the moments between trials,
        # not a sum over processes or a reading of the wrong tree
        top = max(part["trial_peak_rss_bytes"])
        assert top <= part["peak_rss_bytes"] <= 1.25 * top, (part["peak_rss_bytes"], top)
    with Store(store, readonly=True) as reader:
        (summary,) = reader.list_runs()
        assert summary.name == data["runner"]["run_name"]
        assert (summary.trials_ok, summary.status) == (2, "completed")
        assert reader.samples(summary.run_id), "the runner's outside samples reach the store"
