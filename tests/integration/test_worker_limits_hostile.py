"""What the kernel and a flooding program do to a run's workers (issue 23, items 4 and 7)."""

from __future__ import annotations

import sys
from pathlib import Path

import trainguard
from trainguard.process.oom_score import WORKER_OOM_SCORE_RAISE, oom_score_adj

HERE = Path(__file__).parent


def test_workers_and_what_they_start_come_before_the_supervisor_for_the_oom_killer():
    own = oom_score_adj()
    assert own is not None
    with trainguard.Runner(workers=1) as runner:
        (result,) = runner.map(f"{HERE / 'hostile_trials.py'}:oom_scores", [{}])
    assert result.ok, result.error
    expected = min(1000, own + WORKER_OOM_SCORE_RAISE)
    assert result.value["worker"] == result.value["child"] == expected
    assert oom_score_adj() == own  # the supervisor keeps its own


def test_stderr_without_a_newline_does_not_grow_the_worker(tmp_path):
    flood = "import sys\nfor _ in range(300): sys.stderr.write('x' * (1 << 20))\nprint('TRAINGUARD_RESULT 1')"
    with trainguard.Runner(workers=1, store=tmp_path / "s.db") as runner:
        (result,) = runner.map(trainguard.Command([sys.executable, "-c", flood]), [{}], name="flood")
    assert result.ok, result.error
    # 300 MiB on one line: the worker holds at most a 64 KiB piece of it (it held all of it, twice)
    assert result.peak_rss_bytes < 150 << 20, result.peak_rss_bytes


def test_the_run_seed_reaches_numpys_default_rng():
    import numpy as np

    fn = f"{HERE / 'hostile_trials.py'}:generator_draws"
    with trainguard.Runner(workers=1, seed=3) as runner:
        first = [r.value for r in runner.map(fn, [{}, {}])]
    with trainguard.Runner(workers=2, seed=3, policy=trainguard.Policy(max_trials_per_worker=1)) as runner:
        again = [r.value for r in runner.map(fn, [{}, {}])]
    assert first == again  # the same draws in other workers, fresh or reused
    assert first[0] != first[1] and first[0]["first"] != first[0]["second"]
    assert first[0]["explicit"] == float(np.random.default_rng(7).random())  # a given seed is kept
