"""GPU-only options on this machine, which has no GPU: one warning line before the first trial,
naming how the absence was detected; the run goes on (issue 35, item 5).

The test reads the machine itself (device nodes, pynvml) and is skipped where a GPU is seen.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from trainguard.exceptions import NoGpuWarning
from trainguard.runner.gpu_presence import no_gpu_evidence, read_gpu_facts

pytestmark = pytest.mark.skipif(
    no_gpu_evidence(read_gpu_facts()) is None, reason="a GPU (or a driver's device nodes) is seen here"
)


def _expected_nvml_words() -> str:
    """What doctor and the warning must say of NVML here, read without trainguard."""
    try:
        import pynvml
    except ImportError:
        return "pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - the class names the cause
        return "cannot be loaded" if "LibraryNotFound" in type(err).__name__ else "pynvml is installed but"
    return "NVML lists no GPU"


def test_the_machine_has_no_gpu_nodes():
    # the premise of the file, checked without trainguard
    assert not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/kfd")


def test_the_python_api_warns_once_and_runs(tmp_path):
    from trainguard import Device, Runner

    with pytest.warns(NoGpuWarning) as caught:
        runner = Runner(store=None, device=Device(torch_alloc_conf="expandable_segments:True"), gpus=[0])
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("Device(torch_alloc_conf=...) and gpus=...: these GPU options have no effect")
    assert _expected_nvml_words() in message and "/dev/nvidia" in message
    fn = tmp_path / "double.py"
    fn.write_text("def double(params):\n    return params['x'] * 2\n")
    with runner:
        assert [r.value for r in runner.map(f"{fn}:double", [{"x": 1}, {"x": 2}])] == [2, 4]


def test_the_cli_says_it_in_one_line_before_the_first_trial(tmp_path):
    pytest.importorskip("tensorflow")
    fn = tmp_path / "double.py"
    fn.write_text("def double(params):\n    return params['x'] * 2\n")
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"x": [1, 2]}))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "run",
            f"{fn}:double",
            "--params",
            str(params),
            "--store",
            str(tmp_path / "s.db"),
            "--tf-memory-growth",
            "true",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr
    assert [r["value"] for r in json.loads(done.stdout)["results"]] == [2, 4]
    lines = done.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "no GPU is seen" in line]
    assert len(said) == 1, done.stderr
    line = lines[said[0]]
    assert line.startswith("trainguard run: warning: --tf-memory-growth: this GPU option has no effect")
    assert _expected_nvml_words() in line
    trials = [i for i, line in enumerate(lines) if line.startswith("trial ")]
    assert all(said[0] < i for i in trials)
