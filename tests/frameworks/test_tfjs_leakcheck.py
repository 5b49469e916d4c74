"""``trainguard leakcheck train.js:step`` with real @tensorflow/tfjs: the first source document's
loop of many small models, leaking and disposed, and bad input in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tfjs_support import SEED_LOOP, needs_tfjs

pytestmark = needs_tfjs

# A budget in iterations, not seconds, so the verdict does not depend on how busy the machine is.
# The tolerance sits at twice the 10-30 KiB of RSS that TF.js keeps per model built even when every
# tensor is disposed (measured: docs/how-to/tfjs.md); a forgotten model and its data are 268 KiB.
BUDGET = ["--max-iterations", "130", "--max-time", "10m", "--tolerance", "64KB", "--json"]


def _leakcheck(
    target: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "trainguard", "leakcheck", target, *extra],
        capture_output=True,
        text=True,
        env=full,
        timeout=600,
    )


def test_models_never_disposed_leak_with_tensors_per_iteration_named():
    out = _leakcheck(f"{SEED_LOOP}:step_leaky", "--setup", "setup", *BUDGET)
    assert out.returncode == 1, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["verdict"] == "leak"
    # TF.js's tensor bytes, decided on beside RSS, grow by exactly what each iteration forgets
    tensors = report["extra"]["tfjs_tensors"]
    assert tensors["verdict"] == "leak"
    assert tensors["slope_bytes_per_iter"] == (64 * 32 + 32 + 32 + 1 + 1 + 1024 * 65) * 4
    growth = {g["kind"]: g for g in report["growth_by_kind"]}
    # per model: 4 weights and the optimizer's learning rate; its data: xs [1024, 64] and ys [1024, 1]
    assert growth["tfjs tensors"]["count_per_iter"] == 7
    assert growth["tfjs tensors"]["bytes_per_iter"] == (64 * 32 + 32 + 32 + 1 + 1 + 1024 * 65) * 4
    assert "+7.0 tfjs tensors/iter, +268.3 KiB/iter" in growth["tfjs tensors"]["text"]
    assert growth["tfjs variables"]["count_per_iter"] == 4
    assert any("dispose" in h for h in report["hints"])
    assert report["extra"]["runtime"] == "node"
    # TF.js's exact tensor count is count evidence, as the Python census is: no 120-call wait
    assert report["iterations"] <= 20, report["reason"]
    assert "tf.memory().numTensors rose +7.0 tensors/call" in report["reason"]


#: The disposed loop keeps 10-30 KiB a model, a third of the tolerance, under ±600 KiB of noise:
#: its interval's strict bound is under the tolerance after 77-152 iterations (measured), so 130
#: left it inconclusive now and then, with the earlier statistic too (1 in 3 runs); it stops at its
#: verdict, so the larger budget costs nothing when it decides early.
DISPOSED_BUDGET = ["--max-iterations", "250", *BUDGET[2:]]


def test_the_same_loop_with_everything_disposed_does_not_leak():
    out = _leakcheck(f"{SEED_LOOP}:step_disposed", "--setup", "setup", *DISPOSED_BUDGET)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["verdict"] in ("no_leak", "plateau"), report["reason"]
    assert report["extra"]["tfjs_tensors"]["verdict"] == "no_leak"
    assert report["extra"]["tfjs_tensors"]["slope_bytes_per_iter"] == 0
    assert not any(g["kind"] == "tfjs tensors" for g in report["growth_by_kind"])


def _error_lines(stderr: str) -> list[str]:
    """stderr less the progress lines said before the work (``trainguard leakcheck: ...``, on a pipe)."""
    prefix = "trainguard leakcheck: "
    return [
        line
        for line in stderr.strip().splitlines()
        if not (line.startswith(prefix) and not line[len(prefix) :].startswith(("error:", "warning:")))
    ]


def test_bad_input_one_line_each(tmp_path):
    missing = _leakcheck(str(tmp_path / "nope.js") + ":step")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    no_step = _leakcheck(f"{SEED_LOOP}:stepp", "--setup", "setup")
    assert no_step.returncode == 2
    assert 'exports no step "stepp" (it exports: ' in no_step.stderr
    assert len(_error_lines(no_step.stderr)) == 1
    no_setup = _leakcheck(f"{SEED_LOOP}:step_leaky", "--setup", "prepare")
    assert no_setup.returncode == 2 and 'exports no setup "prepare"' in no_setup.stderr
    no_node = _leakcheck(f"{SEED_LOOP}:step_leaky", env={"PATH": str(tmp_path)})
    assert no_node.returncode == 6  # a missing dependency
    assert "install Node.js 18 or newer" in no_node.stderr and "apt-get install nodejs" in no_node.stderr
    assert len(no_node.stderr.strip().splitlines()) == 1


def test_step_throwing_on_the_first_call_is_inconclusive_with_the_error():
    out = _leakcheck(f"{SEED_LOOP}:step_throws", "--setup", "setup", "--json")
    assert out.returncode == 3, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["verdict"] == "inconclusive"
    assert report["reason"].startswith("the step raised TypeError at iteration 1: xs is undefined")
    assert report["error"]["iteration"] == 1
    assert "seed_loop.js" in report["error"]["traceback"]


KEPT = SEED_LOOP.parent / "kept_tensor.js"


def test_one_tensor_kept_a_call_is_a_leak_within_20_calls_with_the_counts_named():
    out = _leakcheck(f"{KEPT}:step_keep_one", "--max-iterations", "130", "--max-time", "10m", "--json")
    assert out.returncode == 1, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["verdict"] == "leak" and report["iterations"] <= 20, report["reason"]
    assert "tf.memory().numTensors rose +1.0 tensors/call" in report["reason"]
    # the growth reported is the tensors' bytes the verdict rests on, never a flat RSS's "0 B/iter"
    assert report["slope_bytes_per_iter"] == 64 * 64 * 4
    assert report["metric"] == "tfjs tensor bytes"


def test_a_flat_tfjs_step_read_call_by_call_is_not_a_leak():
    # The Node process's RSS climbs in steps of about 1 MiB (V8 and the allocator committing pages)
    # over the first 200 calls, then levels off: read in a window of steps it is +13 KiB a call (one
    # CI run in several called that a leak at the 1 KiB floor of a 1 ms step). The tensors' exact
    # counts are what this test is about; RSS gets the tolerance the other TF.js tests use.
    out = _leakcheck(
        f"{KEPT}:step_flat", "--max-iterations", "300", "--max-time", "10m", "--tolerance", "64KB", "--json"
    )
    report = json.loads(out.stdout)
    assert report["verdict"] in ("no_leak", "plateau"), report["reason"]
