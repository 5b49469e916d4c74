"""``trainguard leakcheck`` of the first source document's batchTraining() pattern, with real
@tensorflow/tfjs in Node: ``await tf.tidy(async () => { ... await model.fit(...) })``. TF.js only
logs "Cannot return a Promise inside of tidy."; tidy has disposed the data by the first await and
every fit fails. The check names the misuse, the user's file:line and the fix, and a step whose
every call fails (the error caught and logged by the step) is reported as failing, never as a leak
verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tfjs_support import FIXTURES, needs_tfjs

pytestmark = needs_tfjs

ASYNC_TIDY = FIXTURES / "async_tidy.js"
FIX = "trainguard.scope(async () => ...)"


def _leakcheck(step: str, *extra: str) -> tuple[int, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "trainguard", "leakcheck", f"{ASYNC_TIDY}:{step}", "--json", *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=600,
    )
    assert out.stdout, out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout)


def test_the_document_pattern_names_the_async_tidy_its_line_and_the_fix():
    rc, report = _leakcheck("step_async_tidy")
    assert rc == 3 and report["verdict"] == "inconclusive"
    reason = report["reason"]
    assert reason.startswith("the step raised TypeError at iteration 1"), reason
    assert "tf.tidy() was given an async function at " in reason
    assert "async_tidy.js:28:" in reason  # the user's line, not TF.js's
    assert FIX in reason
    [misuse] = report["extra"]["tfjs_misuse"]
    assert misuse["kind"] == "async-tidy" and misuse["rejected"] == 1


def test_every_call_failing_caught_and_logged_is_reported_as_failing_not_as_a_verdict():
    rc, report = _leakcheck("step_async_tidy_caught")
    assert report["verdict"] == "inconclusive", report["reason"]
    assert rc == 3
    assert report["error"] is None  # the step itself never raised: it caught and logged
    calls = report["iterations"]
    assert calls >= 10 and report["extra"]["failed_calls"] == calls
    assert report["reason"].startswith(f"every one of the {calls} calls failed (TypeError: ")
    assert "async_tidy.js:34:" in report["reason"] and FIX in report["reason"]
    assert any("async_tidy.js:34:" in h and FIX in h for h in report["hints"])


def test_an_async_tidy_that_does_not_fail_keeps_its_verdict_and_names_the_misuse():
    # what it makes after the await is outside any scope: one tensor a call, a leak
    rc, report = _leakcheck("step_async_tidy_keeps")
    assert report["verdict"] == "leak" and rc == 1, report["reason"]
    assert "tf.tidy() was given an async function at " in report["reason"]
    assert "async_tidy.js:43:" in report["reason"] and FIX in report["reason"]
    assert report["extra"]["failed_calls"] == 0


def test_the_fix_has_no_misuse():
    # 30 calls: what the misuse check needs (it names a misuse at its first call); whether a clean
    # TF.js loop is called a leak under the default budget is tests/frameworks/test_tfjs_leakcheck_defaults.py's
    rc, report = _leakcheck("step_scoped", "--max-iterations", "30")
    assert report["iterations"] == 30 and report["extra"]["failed_calls"] == 0, report["reason"]
    assert report["verdict"] != "leak" and rc != 1, report["reason"]
    assert report["extra"]["tfjs_misuse"] == [] and "tidy" not in report["reason"]
    assert not any("tidy" in h for h in report["hints"]), report["hints"]
