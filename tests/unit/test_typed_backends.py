"""``trainguard.RayBackend`` and ``trainguard.SlurmBackend``: the typed face of ``Runner(backend=...)``.

Frozen settings checked when made (a one-line ConfigError, before any Runner), the same running
backend as the older loose keywords (which still work, with a DeprecationWarning naming the new
form), the CLI's ``--backend``/``--address``/``--resources``/``--slurm`` building them, and a real
local run with ``backend="local"``. Nothing here connects to a cluster: constructing the running
Ray or Slurm backend only checks its settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import sqlite3
import warnings

import pytest

import trainguard
from trainguard import ConfigError, RayBackend, Runner, SlurmBackend
from trainguard.cli.run import _backend as cli_backend


def _quiet_runner(**kwargs):
    """A Runner made with DeprecationWarnings recorded: ``(runner, [warning messages])``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner = Runner(store=None, **kwargs)
    return runner, [str(w.message) for w in caught if w.category is DeprecationWarning]


def test_the_typed_backends_are_public_frozen_and_normalised():
    assert "RayBackend" in trainguard.__all__ and "SlurmBackend" in trainguard.__all__
    ray = RayBackend(address=" 127.0.0.1:6379 ", resources="cpu=2,GPU=1")
    assert ray.address == "127.0.0.1:6379"
    assert ray.resources == {"CPU": 2.0, "GPU": 1.0}
    assert RayBackend().resources == {"CPU": 1.0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        ray.address = "auto"  # type: ignore[misc]
    slurm = SlurmBackend(partition="gpu", setup="module load cuda", pilots="2", folder="/shared/tg")  # type: ignore[arg-type]
    assert slurm.setup == ("module load cuda",)
    assert slurm.pilots == 2  # a count however given is a number
    assert slurm.checked.submitit["partition"] == "gpu"
    with pytest.raises(dataclasses.FrozenInstanceError):
        slurm.partition = "cpu"  # type: ignore[misc]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: RayBackend(address="127.0.0.1:99999"), r"the port 99999 is not a TCP port"),
        (lambda: RayBackend(address=""), r"RayBackend\(address=''\) must be 'auto'"),
        (lambda: RayBackend(resources={"CPU": -1}), r"resources: CPU=-1 must be a number >= 0"),
        (lambda: RayBackend(resources=3), r"resources must be a dict"),  # type: ignore[arg-type]
        (lambda: RayBackend(connect_timeout=0), r"connect_timeout=0\) must be a number of seconds above 0"),
        (lambda: SlurmBackend(workers_per_pilot=0), r"workers_per_pilot=0 must be a whole number >= 1"),
        (lambda: SlurmBackend(queue_timeout="0s"), r"queue_timeout='0s' must be above 0"),
        (lambda: SlurmBackend(folder=" "), r"folder=' ' must be a folder path"),
        (lambda: SlurmBackend(partition=5), r"SlurmBackend\(partition=5\) must be a string"),  # type: ignore[arg-type]
        (lambda: SlurmBackend(options={"job_name": "x"}), r"job_name= is set by trainguard"),
        (lambda: SlurmBackend(options={"partition": "gpu"}), r"partition is a parameter of its own"),
        (lambda: SlurmBackend(options=["a"]), r"options=...\) must be a dict"),  # type: ignore[arg-type]
    ],
)
def test_bad_settings_are_one_line_at_construction(make, words):
    with pytest.raises(ConfigError, match=words) as info:
        make()
    assert "\n" not in str(info.value)


def test_the_old_ray_keywords_make_the_same_backend_and_name_the_new_form():
    old, said = _quiet_runner(backend="ray", address="127.0.0.1:6379", resources={"CPU": 2})
    new, none = _quiet_runner(backend=RayBackend(address="127.0.0.1:6379", resources={"CPU": 2}))
    assert none == []
    assert len(said) == 1 and "trainguard.RayBackend(address=..., resources=...)" in said[0]
    for runner in (old, new):
        assert runner._backend.name == "ray"
        assert runner._backend.address == "127.0.0.1:6379"
        assert runner._backend.resources == {"CPU": 2.0}
    # a slot's CPUs set its threads either way
    assert old._config.threads == new._config.threads == 2
    plain, quiet = _quiet_runner(backend="ray")  # the name alone is not deprecated
    assert quiet == [] and plain._backend.resources == {"CPU": 1.0}


def test_the_old_slurm_dict_makes_the_same_backend_and_names_the_new_form(tmp_path):
    options = {
        "partition": "gpu",
        "time": 10,
        "folder": str(tmp_path),
        "workers_per_pilot": 2,
        "cpus_per_gpu": 4,
    }
    old, said = _quiet_runner(backend="slurm", slurm=options)
    typed = SlurmBackend(
        partition="gpu", time=10, folder=str(tmp_path), workers_per_pilot=2, options={"cpus_per_gpu": 4}
    )
    new, none = _quiet_runner(backend=typed)
    assert none == []
    assert len(said) == 1 and "trainguard.SlurmBackend(partition=..., folder=..., ...)" in said[0]
    assert SlurmBackend.from_options(options) == typed
    assert old._backend.options == new._backend.options == typed.checked
    assert old._backend.options.submitit == {
        "partition": "gpu",
        "time": 10,
        "cpus_per_gpu": 4,
        "cpus_per_task": 2,
    }


def test_loose_keywords_beside_a_typed_backend_or_the_wrong_name_are_refused():
    with pytest.raises(
        ConfigError, match=r"address= is given beside backend=RayBackend\(...\): give it inside"
    ):
        Runner(backend=RayBackend(), address="auto", store=None)
    with pytest.raises(ConfigError, match=r"slurm= is given beside backend=SlurmBackend"):
        Runner(backend=SlurmBackend(), slurm={"partition": "x"}, store=None)
    with pytest.raises(ConfigError, match="slurm= is for backend='slurm'"):
        Runner(slurm={"partition": "x"}, store=None)
    with pytest.raises(ConfigError, match="address= and resources= are for backend='ray'"):
        Runner(backend="slurm", resources="CPU=1", store=None)
    with pytest.raises(ConfigError, match=r"backend='kubernetes' is not a backend: use 'local'.*RayBackend"):
        Runner(backend="kubernetes", store=None)  # type: ignore[arg-type]


def test_a_typed_cluster_backend_refuses_a_budget_sized_to_this_machine():
    with pytest.raises(ConfigError, match=r"with backend='ray' give workers=N"):
        Runner(workers="auto", memory_budget="4GB", backend=RayBackend(), store=None)
    with pytest.raises(ConfigError, match=r"with backend='slurm' give workers=N"):
        Runner(memory_budget="4GB", backend=SlurmBackend(), store=None)


def _args(**given):
    values = {"backend": "local", "address": None, "resources": None, "slurm": None, **given}
    return argparse.Namespace(**values)


def test_the_command_line_builds_the_typed_backends():
    assert cli_backend(_args()) == "local"
    assert cli_backend(_args(backend="ray", address="auto", resources="CPU=2")) == RayBackend(
        address="auto", resources={"CPU": 2}
    )
    assert cli_backend(
        _args(backend="slurm", slurm=["partition=gpu", "pilots=2", "setup=module load x"])
    ) == (SlurmBackend(partition="gpu", pilots=2, setup=("module load x",)))
    with pytest.raises(ConfigError, match="--slurm is for --backend slurm"):
        cli_backend(_args(slurm=["partition=gpu"]))
    with pytest.raises(ConfigError, match="--address and --resources are for --backend ray"):
        cli_backend(_args(backend="slurm", address="auto"))


def test_a_real_local_run_with_the_backend_named(tmp_path):
    trial = tmp_path / "trial.py"
    trial.write_text(
        "import os\n\ndef train(params):\n    return {'double': params['x'] * 2, 'pid': os.getpid()}\n"
    )
    db = tmp_path / "runs.db"
    with Runner(workers=2, backend="local", store=db) as runner:
        results = runner.map(f"{trial}:train", [{"x": 1}, {"x": 2}, {"x": 3}], name="local-named")
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert [r.value["double"] for r in results] == [2, 4, 6]
    import os

    assert all(r.value["pid"] != os.getpid() for r in results)  # in workers, not here
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM runs WHERE name = 'local-named'").fetchone()
    assert count == 1


def test_runners_signature_is_typed_without_any():
    import inspect

    signature = inspect.signature(Runner.__init__)
    loose = {
        name: str(p.annotation)
        for name, p in signature.parameters.items()
        if name != "self" and (p.annotation is inspect.Parameter.empty or "Any" in str(p.annotation))
    }
    assert loose == {}
    assert "RayBackend" in str(signature.parameters["backend"].annotation)
    assert "SlurmBackend" in str(signature.parameters["backend"].annotation)
