"""Shared test set-up: marker handling and small helpers. Frameworks are imported only by the tests that use them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

# the fast lane (--fast), the order files run in, and the durations both are cut from
# (--record-durations): tests/_lanes.py
pytest_plugins = ["_lanes"]

# Quiet TF's C++ logs and keep each test process to modest threading on a 2-core machine.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _gpu_present() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_PLATFORM_MARKS = {"windows": "win32", "macos": "darwin"}


def pytest_ignore_collect(collection_path, config):
    """The solo phase (``-m solo``, scripts/test.sh) collects only the test files that mark a test
    ``solo``: importing the other 250 test modules only to deselect their tests took 10 CPU s."""
    name = collection_path.name
    if config.getoption("markexpr") == "solo" and name.startswith("test_") and name.endswith(".py"):
        return "solo" not in collection_path.read_text() or None
    return None


def pytest_collection_modifyitems(config, items):
    from _lanes import order_longest_files_first, select_fast_lane

    select_fast_lane(config, items)
    order_longest_files_first(items)
    # code for another platform, written against its real API, runs only there (hosted CI)
    for mark, platform in _PLATFORM_MARKS.items():
        skip_other = pytest.mark.skip(
            reason=f"needs {mark} (this is {sys.platform}); the hosted CI's {mark} job runs it"
        )
        for item in items:
            if item.get_closest_marker(mark) and sys.platform != platform:
                item.add_marker(skip_other)
    if any(item.get_closest_marker("gpu") for item in items) and not _gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a driver (nvidia-smi -L failed)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_trial_context_left():
    """A TrialContext a test made in this process is not the current one for the next test (a
    MemoryCallback(action="checkpoint") there would find it instead of saying it has none)."""
    yield
    context = sys.modules.get("trainguard.runner.worker.context")
    if context is not None:
        context.end_current()


@pytest.fixture
def python_exe() -> str:
    return sys.executable


def _run_trainguard(
    *args: str, timeout: float = 120, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    # the child imports the trainguard this test run imports (a worktree's src, say)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "trainguard", *args],
        capture_output=True,
        text=True,
        input=input,
        env=env,
        timeout=timeout,
    )


@pytest.fixture
def trainguard_cli():
    """``trainguard_cli("show", "run1", "--json")``: the CLI in a subprocess, its output as text."""
    return _run_trainguard


@pytest.fixture
def small_disk(tmp_path):
    """A real 4 MiB file system (tmpfs) mounted for the test, unmounted after it; skipped with the
    reason where mounting is not permitted (not root, or a container without CAP_SYS_ADMIN).
    ``small_disk.path`` is its folder; ``small_disk.resize("64m")`` grows it (space freed)."""
    import subprocess

    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here ({done.stderr.strip() or 'mount failed'}): run as root")

    from types import SimpleNamespace

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount_point)], check=True)

    try:
        yield SimpleNamespace(path=mount_point, resize=resize)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The Slurm tests' own one-node cluster: its config in a private state folder, its own
    ports, started with ``scripts/slurm-local.sh start-private`` (slurmctld/slurmd ``-f`` that
    config) and stopped at the end. ``SLURM_CONF`` points every sbatch/squeue/scancel of the
    tests, the backend and submitit at it, never at whatever Slurm answers on the machine."""
    script = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "slurm-local.sh"
    )
    if os.geteuid() != 0:
        pytest.skip("the Slurm tests start their own slurmctld/slurmd, which needs root")
    folder = tmp_path_factory.mktemp("slurm-cluster")
    done = subprocess.run(
        ["bash", script, "start-private", str(folder)], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        subprocess.run(["bash", script, "stop-private", str(folder)], capture_output=True, timeout=120)
        pytest.fail(f"scripts/slurm-local.sh start-private failed: {done.stderr.strip()[-2000:]}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(folder / "slurm.conf")
    try:
        yield folder / "slurm.conf"
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        subprocess.run(["bash", script, "stop-private", str(folder)], capture_output=True, timeout=120)


@pytest.fixture(autouse=True)
def _no_warm_joblib_workers_across_tests():
    """The joblib backend keeps a finished call's workers warm for 5 minutes, as loky keeps its own:
    both ended after each test, so a later test that sums this process's children or checks that
    nothing is left does not find another test's workers."""
    yield
    if "trainguard.integrations._warm_pools" in sys.modules:
        import trainguard.joblib

        trainguard.joblib.shutdown()
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)
