"""The Ray backend's node-local agent kills where the local sampler kills, with the same message: both
ask :func:`~trainguard.runner.policy.limit_verdict`. A training that ignores memory pressure past its
``pressure_grace``, run locally and on a real Ray (started on this machine), ends the same way; a
training that checkpoints under pressure on Ray goes on in a fresh worker, as it does locally. (A
memory kill, of the tree or of what it wrote into /dev/shm: tests/contract/test_backend_contract.py.)
Skipped when ray is not installed (``pip install -e '.[ray]'``)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from trainguard.runner import Policy, Runner  # noqa: E402
from trainguard.store import Store  # noqa: E402

HERE = Path(__file__).parent
TRAIN = str(HERE / "pressure_trials.py") + ":leaky_training"
PARAMS = {"epochs": 22, "keep_mib": 40, "epoch_s": 0.3}
MIB = 1 << 20

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or not os.path.isdir("/dev/shm"), reason="Linux /dev/shm"
    ),
]


@pytest.fixture(scope="module")
def ray_here():
    ray.init(
        num_cpus=2,
        object_store_memory=80 * MIB,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


def _shape(message: str) -> str:
    """A kill message with its figures masked: what it says, not the sample it was read at."""
    return re.sub(r"[\d.,]+ (B|KiB|MiB|GiB|TiB|s)\b", "N", message)


def _run(tmp_path: Path, backend: str, fn: str, params: dict, policy: Policy, name: str):
    db = tmp_path / f"{backend}-{name}.db"
    with Runner(workers=1, backend=backend, store=db, policy=policy) as runner:
        (result,) = runner.map(fn, [params], name=name)
    with Store(db, readonly=True) as store:
        run = store.get_run(name)
        return result, store.attempts(run.run_id), store.events(run.run_id, kinds=["pressure"])


def test_pressure_grace_ends_a_ray_trial_as_it_ends_a_local_one(ray_here, tmp_path):
    policy = Policy(memory_limit="2GB", soft_limit="450MB", pressure_grace="1s")
    ends = {}
    for backend in ("local", "ray"):
        result, attempts, pressure = _run(
            tmp_path, backend, TRAIN, {**PARAMS, "listen": False}, policy, "grace"
        )
        assert result.status == "failed" and result.error.status == "killed_memory", result.error
        assert attempts[0].peak_rss_bytes < 1.5e9  # ended at the soft limit's grace, not the hard limit
        assert [e.data["action"] for e in pressure] == ["grace_expired"], backend
        ends[backend] = (result.error.message, pressure[0].data)
    (local, local_event), (on_ray, ray_event) = ends["local"], ends["ray"]
    assert on_ray.startswith("killed under memory pressure: no checkpoint within pressure_grace=1.0 s")
    assert _shape(on_ray) == _shape(local), (on_ray, local)
    # the agent raised the pressure and told the worker on its node; the driver kept it
    assert ray_event["delivered"] is True and ray_event["rule"] == local_event["rule"] == "soft_limit"


def test_a_ray_trial_that_checkpoints_under_pressure_goes_on_in_a_fresh_worker(ray_here, tmp_path):
    policy = Policy(memory_limit="700MB", soft_limit="450MB")
    result, attempts, pressure = _run(tmp_path, "ray", TRAIN, PARAMS, policy, "listens")
    assert result.ok, result.error
    assert result.value["epochs"] == 22 and result.value["resumed"] is True
    statuses = [a.status for a in attempts]
    assert "killed_memory" not in statuses and statuses[-1] == "ok" and statuses.count("staged") >= 1
    assert [e.data["action"] for e in pressure] == ["checkpointed"] * statuses.count("staged")
    assert all(e.data["delivered"] is True for e in pressure)
