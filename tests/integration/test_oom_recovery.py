"""Out-of-memory recovery across the process boundary, with real workers, real limits, a real store.

The workload is ``trainguard.workloads.numpy_fit``: its peak grows by about 80 KiB per sample of
``batch_size`` (measured: 114 MiB at 1024, 355 MiB at 4096, about 34 MiB of interpreter and numpy).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.runner import Policy, Runner, Shrink
from trainguard.runner.policy import OOM_STATUSES

HERE = Path(__file__).parent
OOM_TRIALS = str(HERE / "oom_trials.py")
LIMIT = 350_000_000  # 334 MiB: 8192 samples need about twice that
FIT = "trainguard.workloads:numpy_fit"


def _largest_that_fits(sizes):
    """Brute force: each size alone in a fresh worker under the limit; the largest that ends ok under it."""
    policy = Policy(memory_limit=LIMIT, peak_ratio=None, max_trials_per_worker=1)
    with Runner(policy=policy, store=None, sample_interval="20ms") as runner:
        results = runner.map(FIT, [{"batch_size": s, "steps": 1} for s in sizes])
    fits = [s for s, r in zip(sizes, results, strict=True) if r.ok and r.peak_rss_bytes <= LIMIT]
    assert fits and fits[-1] < sizes[-1], [(r.status, r.peak_rss_bytes) for r in results]
    return max(fits)


@pytest.mark.slow
def test_shrink_finishes_in_a_fresh_worker_near_the_largest_size_and_the_next_run_starts_there(tmp_path):
    largest = _largest_that_fits([2048, 3072, 4096, 5120])
    rule = Shrink("batch_size", factor=0.5, minimum=1, accumulate="grad_accum")
    policy = Policy(memory_limit=LIMIT, peak_ratio=None, on_oom=rule)
    params = [{"batch_size": 8192, "grad_accum": 1}]
    with Runner(policy=policy, store=tmp_path / "oom.db", sample_interval="20ms") as runner:
        (result,) = runner.map(FIT, params, name="first")
        store = runner.store
        run = store.get_run("first")
        attempts = store.attempts(run.run_id)
        events = store.events(run.run_id)
        workers = store.workers(run.run_id)
        (second,) = runner.map(FIT, params, name="second")
        second_events = store.events(store.get_run("second").run_id)
        fitted = store.fitted_sizes(FIT)
    assert result.ok, result.error
    size = result.value["batch_size"]
    assert size < 8192 and largest / 2 <= size <= largest, (size, largest)
    assert result.value["effective_batch"] == 8192  # batch x accumulation unchanged
    assert result.ran_with == {"batch_size": size, "grad_accum": 8192 // size}
    # every attempt recorded with its size, its cause and its peak; each in its own worker
    assert len(attempts) == result.attempts >= 2
    assert all(a.status in OOM_STATUSES for a in attempts[:-1]) and attempts[-1].status == "ok"
    assert not any(a.status == "os_oom" for a in attempts)
    assert [a.error.ran_with["batch_size"] for a in attempts[:-1]] == [
        8192 // 2**i for i in range(len(attempts) - 1)
    ]
    assert all(a.peak_rss_bytes for a in attempts)
    assert len({a.worker_id for a in attempts}) == len(attempts)
    assert [w.reason for w in workers[:-1]] == ["killed_memory"] * (len(attempts) - 1)
    shrinks = [e for e in events if e.kind == "oom_shrink"]
    assert len(shrinks) == len(attempts) - 1 and "fresh worker" in shrinks[0].message
    # remembered for this function, these params less the shrunk keys, this device and limit
    assert [(f.size, f.params_key, f.source) for f in fitted] == [(size, "{}", "shrink")]
    # a later run starts directly at the remembered size: one attempt, no OOM
    assert second.ok and second.attempts == 1 and second.value["batch_size"] == size
    assert second.value["effective_batch"] == 8192
    assert any(e.kind == "oom_start" and f"batch_size={size}" in e.message for e in second_events)


def test_framework_oom_discards_the_worker_and_shrinks_until_it_fits(tmp_path):
    policy = Policy(on_oom=Shrink("batch_size"), peak_ratio=None)
    params = [{"batch_size": 64, "fits": 10}, {"batch_size": 64, "fits": 10, "tag": "same sizes, other key"}]
    with Runner(policy=policy, store=tmp_path / "f.db") as runner:
        first, second = runner.map(f"{OOM_TRIALS}:fits_under", params, name="f")
        run = runner.store.get_run("f")
        attempts = runner.store.attempts(run.run_id, 0)
        workers = runner.store.workers(run.run_id)
    # 64 -> 32 -> 16 -> 8: three MemoryErrors, each in a worker that is then retired
    assert first.ok and first.value["batch_size"] == 8 and first.attempts == 4
    assert [a.status for a in attempts] == ["framework_oom"] * 3 + ["ok"]
    assert len({a.worker_id for a in attempts}) == 4
    retired = [w for w in workers if w.reason == "recycled"]
    assert len(retired) >= 3 and all(w.detail["rule"] == "out_of_memory" for w in retired[:3])
    assert second.ok and second.value["batch_size"] == 8  # other params: its own search


def test_oom_at_the_minimum_fails_the_trial_saying_so(tmp_path):
    policy = Policy(on_oom=Shrink("batch_size", minimum=4), peak_ratio=None)
    with Runner(policy=policy, store=tmp_path / "m.db") as runner:
        (result,) = runner.map(f"{OOM_TRIALS}:fits_under", [{"batch_size": 16, "fits": 2}], name="m")
    assert result.status == "failed" and result.attempts == 3  # 16, 8, 4
    assert result.error.status == "framework_oom"
    assert "batch_size=4 is the minimum" in result.error.message
