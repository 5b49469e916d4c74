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


#: Leaks that add many countable objects a call (or graph objects, whose fill allowance is small),
#: or one array a call to a list that only grows at its end (the holder's evidence): count evidence
#: calls them within 20 calls at the default settings.
COUNTED_EARLY = {
    "torch_append_outputs",
    "torch_total_loss_accumulate",
    "tf_function_retracing",
    "numpy_global_list",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "fast_step_small_leak",
        "lru_cache_64",
        "numpy_global_list",
        "cache_fills_to_60",
        "warmup_allocator_pool",
        "dict_cache_counter",
        "torch_append_outputs",
        "torch_total_loss_accumulate",
        "tf_function_retracing",
    ],
)
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
        if case in COUNTED_EARLY:
            assert data["iterations"] <= 20, data["reason"]
            # on exact evidence: counts, or the allocator's bytes in use rising at every reading,
            # whichever decides first (beside two CPU hogs a census costs more, so fewer come in
            # the first calls: a loaded round called tf_function_retracing a leak at 15 calls on
            # bytes in use, +143 KiB at each of 16 readings, before its counts did)
            if "count evidence" in data["reason"]:
                assert data["counts"]["status"] == "supports_leak", data["counts"]
            else:
                assert (
                    "the allocator's bytes in use" in data["reason"] and "at every one of" in data["reason"]
                ), data["reason"]
        else:
            # one entry a call into a dict: a bounded cache of up to 128 looks the same until it
            # stops (the fast step's dicts carry no exact bytes at all)
            assert data["iterations"] >= 120, data["reason"]
    else:
        assert data["verdict"] in ("no_leak", "plateau") and res.returncode == 0, data["reason"]
