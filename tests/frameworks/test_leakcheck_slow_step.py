"""A slow step gets a budget in calls: the seed's Keras fit loop with
``trainguard.frameworks.cleanup()`` (bench/leak_corpus/keras_tf_seed_fit_cleanup.py, about 1.3 s a
fit here, 10-15 s on a loaded machine) under a ``max_time`` that gives it only a dozen calls, as
two minutes gave a loaded machine 8 (``inconclusive``). The check goes on past ``max_time`` until
its evidence decides, at most ``min_calls`` (100) calls, says so in a progress line, and the CLI
and the Python API (one ``LeakCheckConfig`` of defaults) give the same verdict on the same step,
with what stays of a fit named in the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

CASE = Path(__file__).resolve().parents[2] / "bench" / "leak_corpus" / "keras_tf_seed_fit_cleanup.py"
#: stands in for a slow step: the budget gives about a dozen fits, fewer than any evidence needs
SHORT = "20s"

API = f"""
import json, sys
sys.path.insert(0, {str(CASE.parent)!r})
import trainguard
from keras_tf_seed_fit_cleanup import step
notes = []
report = trainguard.leakcheck(step, max_time={SHORT!r}, progress=lambda e: e.get("note") and notes.append(e["note"]))
print(json.dumps({{"report": report.to_dict(), "notes": notes}}, default=str))
"""


def _env() -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(sys.path))


@pytest.mark.slow
def test_a_slow_step_goes_on_to_a_verdict_and_cli_and_api_agree() -> None:
    cli = subprocess.run(
        [sys.executable, "-m", "trainguard", "leakcheck", f"{CASE}:step", "--max-time", SHORT, "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=900,
    )
    assert cli.stdout, cli.stderr[-3000:]
    by_cli = json.loads(cli.stdout)
    api = subprocess.run([sys.executable, "-c", API], capture_output=True, text=True, env=_env(), timeout=900)
    assert api.returncode == 0, api.stderr[-3000:]
    out = json.loads(api.stdout.strip().splitlines()[-1])
    by_api, notes = out["report"], out["notes"]
    for report in (by_cli, by_api):
        # max_time ran out after a dozen fits; the check went on in calls, at most min_calls
        assert report["extra"]["past_max_time_at_call"] is not None, report["reason"]
        assert report["iterations"] <= 100
        assert report["verdict"] == "no_leak", report["reason"]
        # what stays of a fit is named: a few KiB, where the seed's loop without cleanup() grows MiBs
        assert report["slope_bytes_per_iter"] < 2**20
        assert "KiB/iter" in report["reason"]
    assert by_cli["verdict"] == by_api["verdict"]
    assert cli.returncode == 0
    said = "is spent after"
    assert any(said in line and "at most 100 calls" in line for line in cli.stderr.splitlines()), cli.stderr[
        -2000:
    ]
    assert any(said in n for n in notes)
