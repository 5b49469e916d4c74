"""`import trainguard`, `trainguard --help` and the pytest plugin import no framework; doctor --json;
the public names of `trainguard` are pinned."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "torch",
    "tensorflow",
    "jax",
    "keras",
    "optuna",
    "ray",
    "pynvml",
    "IPython",
    "ipykernel",
    "sklearn",
    "mlflow",
    "transformers",
    "lightning",
    "pytorch_lightning",
)

_CHECK = """
import sys
{code}
heavy = [m for m in {heavy!r} if m in sys.modules]
print("HEAVY=" + ",".join(heavy))
"""


@pytest.mark.parametrize(
    "code",
    [
        "import trainguard",
        "import trainguard; trainguard.scope; trainguard.ScopeReport; trainguard.Sampler; trainguard.census",
        "import trainguard.integrations.pytest_plugin",
        "import trainguard; trainguard.optuna.optimize; trainguard.optuna.isolated; trainguard.keras",
        "import trainguard; trainguard.frameworks.cleanup()",
        "import trainguard.transformers as t, trainguard.lightning\nt.hyperparameter_search; t.TrainerTrial(str)",
        "import trainguard, trainguard.notebook, trainguard.process; trainguard.isolated(len)",
        "from trainguard.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=[
        "import",
        "public-names",
        "pytest-plugin",
        "integrations",
        "cleanup",
        "transformers-lightning",
        "isolated-notebook",
        "cli-help",
    ],
)
def test_no_framework_is_imported(code):
    out = subprocess.run(
        [sys.executable, "-c", _CHECK.format(code=code, heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "HEAVY=\n" in out.stdout, f"imported: {out.stdout.splitlines()[-1]}"


def test_cli_help_runs_as_a_command():
    out = subprocess.run(
        [sys.executable, "-m", "trainguard", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "doctor" in out.stdout


def test_doctor_json_parses():
    # how long it takes (under 2 s on an idle machine) is bench/cli_response.py's to measure
    out = subprocess.run(
        [sys.executable, "-m", "trainguard", "doctor", "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"python", "os", "cpus", "memory_total_bytes", "cgroup_limit_bytes", "frameworks"} <= set(data)
    assert {"keras_backend", "gpus", "allocator", "threads", "warnings"} <= set(data)
    assert set(data["frameworks"]) == {"torch", "tensorflow", "keras", "jax"}


def test_doctor_text_runs():
    out = subprocess.run(
        [sys.executable, "-m", "trainguard", "doctor"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "Keras backend" in out.stdout and "allocator" in out.stdout


def test_public_names_are_pinned():
    import trainguard

    assert sorted(trainguard.__all__) == sorted(
        [
            "__version__",
            "Census",
            "CheckpointError",
            "SharedData",
            "SharedDataError",
            "TrialContext",
            "share",
            "Command",
            "Comparison",
            "ConfigError",
            "Device",
            "DiskFullError",
            "DoesNotFitError",
            "Failure",
            "FitResult",
            "FrameworkOOMError",
            "FunctionChangedWarning",
            "LeakError",
            "LeakReport",
            "MemoryLimitError",
            "MissingDependencyError",
            "Policy",
            "RayBackend",
            "Runner",
            "SlurmBackend",
            "Sampler",
            "Shrink",
            "SchemaVersionError",
            "ScopeReport",
            "StoreError",
            "Survivor",
            "Timeline",
            "TrainguardError",
            "TrialError",
            "TrialResult",
            "TrialTimeoutError",
            "UnitError",
            "WorkerCrashedError",
            "WorkerError",
            "census",
            "compare",
            "find_batch_size",
            "format_bytes",
            "isolated",
            "load_ipython_extension",
            "leakcheck",
            "parse_duration",
            "parse_size",
            "probing",
            "report",
            "scope",
            "tree_memory",
        ]
    )
    assert callable(trainguard.scope) and callable(trainguard.census)
    assert trainguard.Sampler.__module__.startswith("trainguard.process")
