"""scikeras on Keras-TF under trainguard's joblib backend: the caller stays flat while the plain
cross_val_score grows with every fold; the scores are the same. Both cases in one fresh process
(one TensorFlow import in the caller instead of two, about 10 CPU seconds), the guarded one first:
the caller it measures has built no model yet, as in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("scikeras")
needs("tensorflow")
needs("sklearn")

from trainguard.leaks.stats import robust_slope  # noqa: E402

CHILD = str(Path(__file__).parent / "scikeras_child.py")
MiB = 2**20


def _run(*modes: str) -> dict:
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    out = subprocess.run(
        [sys.executable, CHILD, *modes], capture_output=True, text=True, env=env, timeout=400
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_cross_val_score_of_a_leaking_keras_classifier_leaves_the_caller_flat():
    both = _run("trainguard", "plain")
    guarded, plain = both["trainguard"], both["plain"]
    # the same folds, the same seeds: the same scores
    assert guarded["scores"] == pytest.approx(plain["scores"], abs=1e-6)
    # every fold ran in a worker: the caller built no model and grew by less than 150 MiB
    assert guarded["build_rss"] == []
    assert guarded["caller_growth_bytes"] < 150 * MiB
    # the plain call grows with every fold (measured 11 MiB a fold on TF 2.21 / Keras 3.15)
    rss = plain["build_rss"]
    print(
        f"guarded caller growth {guarded['caller_growth_bytes'] / MiB:.1f} MiB;",
        f"plain slope {robust_slope(rss).slope / MiB:.1f} MiB a fold;",
        "plain RSS at each build, MiB:",
        [b >> 20 for b in rss],
    )
    assert len(rss) == 6
    steps = [b - a for a, b in zip(rss, rss[1:], strict=False)]
    assert sum(step > 0 for step in steps) >= 4, steps
    assert robust_slope(rss).slope > 4 * MiB, steps
