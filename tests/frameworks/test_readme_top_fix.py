"""The fix a Keras user needs is near the top of the README, and its snippet runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("keras")
needs("tensorflow")

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.slow
def test_the_keras_fix_is_in_the_first_screen_and_runs(tmp_path):
    text = README.read_text()
    head = "\n".join(text.splitlines()[:30])
    assert "trainguard.frameworks.cleanup()" in head and "clear_session()" in head
    assert "+9.82 MiB a fit" in head and "+0.06 MiB a fit" in head  # the measured figures (BENCHMARKS.md)
    [snippet] = re.findall(r"```python\n(.*?)```", head, re.S)
    ran = subprocess.run(
        [sys.executable, "-c", snippet + "\nprint('done')"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**__import__("os").environ, "KERAS_BACKEND": "tensorflow"},
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().endswith("done")
