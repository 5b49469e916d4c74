"""A few cases of bench/leak_corpus/ through the CLI, as users and the corpus runner call it.

Only fast cases run here (the whole corpus is bench/leak_corpus_run.py); the options are the
defaults but a shorter time budget, so the gates of the default (no leak verdict before 120 calls)
are what is tested.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "leak_corpus"


def expected(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "EXPECTED":
            return node.value.value
    raise AssertionError(f"{path} has no EXPECTED")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["fast_step_small_leak", "lru_cache_64", "numpy_global_list"])
def test_corpus_case_gets_its_expected_verdict(case: str) -> None:
    path = CORPUS / f"{case}.py"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "leakcheck",
            f"{path}:step",
            "--setup",
            "setup",
            "--json",
            "--max-time",
            "40s",
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    data = json.loads(res.stdout)
    want = expected(path)
    if want == "leak":
        assert data["verdict"] == "leak" and res.returncode == 1, data["reason"]
        assert data["iterations"] >= 120  # the default gate against warm-ups
    else:
        assert data["verdict"] in ("no_leak", "plateau") and res.returncode == 0, data["reason"]
