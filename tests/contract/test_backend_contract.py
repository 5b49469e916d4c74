"""The backend contract: what every backend does with the same trials, asserted once for all of them.

One class of tests over a ``backend`` fixture parametrized over ``local``, ``ray`` (a Ray started on
this machine, once for the module) and ``slurm`` (the tests' own one-node Slurm, once for the session:
``tests/conftest.py``'s ``slurm``): a trial's result, an exception, a worker that exits, a memory
kill (of the process tree's memory, and of what it wrote into /dev/shm), a timeout, a worker killed
from outside, recycling, ``on_error="stop"``, a run cancelled mid-trial, the shutdown, and nothing
left when the Runner closes. The memory kills, the timeout and the crash end with the same status
and the same message (its figures masked) on every backend as on the local one: the node's agent
asks the same verdict and the driver classifies the same end.

The trials are tiny pure-Python functions (``contract_trials.py``). Ray is skipped only when ray
is not installed, Slurm when submitit is missing or this is not root (the private cluster needs it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _waits import wait_for, wait_gone
from trainguard.exceptions import TrialError
from trainguard.runner import Policy, Runner

HERE = Path(__file__).parent
TRIALS = str(HERE / "contract_trials.py")
MIB = 1 << 20
LIMIT = 200 * 10**6


def _shm_free() -> bool:
    try:
        free = os.statvfs("/dev/shm")
    except OSError:
        return False
    return free.f_bavail * free.f_frsize >= 600 * MIB


#: a tmpfs write over the limit is one of the faults where /dev/shm has room for it
SHM = _shm_free()
#: the faults run, one trial each, in this order, on one worker slot recycled after two trials (one
#: Runner per backend serves most of the class): echo0 and echo1 share a worker, echo2 and boom the
#: next (an exception does not end it), then each fault ends its own worker and echo3 runs on a fresh one
FAULTS = ("echo0", "echo1", "echo2", "boom", "exit_hard", "alloc", *(("fill_shm",) * SHM), "hold", "echo3")
#: why each worker of the faults run ended
ENDS = [
    "recycled",
    "recycled",
    "crashed",
    "killed_memory",
    *(["killed_memory"] * SHM),
    "killed_timeout",
    "shutdown",
]


def ref(name: str) -> str:
    return f"{TRIALS}:{name}"


def field(error: Any, key: str) -> Any:
    """A field of a result's or an attempt's error under its stored key (``status``, ``message``,
    ``type``, ``exitcode``, ``limit_bytes``...), whether the error is a record or the stored dict."""
    if hasattr(error, "to_dict"):
        error = error.to_dict()
    return getattr(error, "fields", error).get(key)


def shape(message: str) -> str:
    """A message with its figures masked: what it says, not the sample it was read at."""
    return re.sub(r"-?[\d.,]+( ?(B|KiB|MiB|GiB|TiB|s|%))?\b", "N", message)


@dataclass
class Backend:
    """One backend under contract: its name and how a Runner gets it for a test's folder."""

    name: str
    make: Callable[[Path], Any]

    def runner(self, folder: Path, **kwargs: Any) -> Any:
        """A Runner on this backend, its store in ``folder`` (typed loosely: tests read its store)."""
        kwargs.setdefault("store", folder / f"{self.name}.db")
        return Runner(backend=self.make(folder), **kwargs)


def _ray_backend() -> Iterator[Backend]:
    ray = pytest.importorskip("ray", reason="the Ray backend needs ray (pip install -e '.[ray]')")
    ray.init(
        num_cpus=2,
        object_store_memory=80 * MIB,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    try:
        yield Backend("ray", lambda folder: "ray")
    finally:
        ray.shutdown()


def _slurm_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    pytest.importorskip("submitit", reason="the Slurm backend needs submitit (pip install -e '.[slurm]')")
    request.getfixturevalue("slurm")  # the tests' private one-node cluster (skips when not root)
    from trainguard.runner import SlurmBackend

    def make(folder: Path) -> Any:
        # two worker places in one pilot: a run of two workers costs one job
        options = {"folder": str(folder / "slurm"), "time": 10, "workers_per_pilot": 2}
        return SlurmBackend.from_options(options)

    yield Backend("slurm", make)


#: Ray and Slurm each start (Ray, a pilot job) for over 5 s before their first case: marked slow
@pytest.fixture(
    scope="module",
    params=[
        "local",
        pytest.param("ray", marks=pytest.mark.slow),
        pytest.param("slurm", marks=pytest.mark.slow),
    ],
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "ray":
        yield from _ray_backend()
    elif request.param == "slurm":
        yield from _slurm_backend(request)
    else:
        yield Backend("local", lambda folder: "local")


@dataclass
class Faults:
    """What one backend made of the faults run: the results by name, the attempts and workers stored."""

    results: dict[str, Any]
    attempts: list[Any]
    workers: list[Any]


_FAULTS: dict[str, Faults] = {}


def _run_faults(backend: Backend, folder: Path) -> Faults:
    """The faults run on ``backend``, once per session (the local one is every other's reference)."""
    if backend.name in _FAULTS:
        return _FAULTS[backend.name]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hold").mkdir(exist_ok=True)
    params = [{"x": i, "kind": name} for i, name in enumerate(FAULTS)]
    params[FAULTS.index("hold")]["folder"] = str(folder / "hold")
    shm = f"/dev/shm/contract-{os.getpid()}-{backend.name}"
    if SHM:  # 400 MB written, none of it in any RSS: killed for what tmpfs holds
        params[FAULTS.index("fill_shm")].update(path=shm, mb=400)
    policy = Policy(memory_limit=LIMIT, timeout=2.0, max_trials_per_worker=2, peak_ratio=None)
    try:
        with backend.runner(folder, policy=policy, seed=7) as runner:
            results = runner.map(ref("fault"), params, name="faults")
            store = runner.store
            run_id = store.get_run("faults").run_id
            attempts = sorted(store.attempts(run_id), key=lambda a: a.index)
            workers = store.workers(run_id)
    finally:
        if os.path.exists(shm):
            os.unlink(shm)
    _FAULTS[backend.name] = Faults(dict(zip(FAULTS, results, strict=True)), attempts, workers)
    return _FAULTS[backend.name]


@pytest.fixture(scope="module")
def faults(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Faults:
    return _run_faults(backend, tmp_path_factory.mktemp(f"faults-{backend.name}"))


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    """The local backend's faults run: the wording every backend must match."""
    return _run_faults(Backend("local", lambda folder: "local"), tmp_path_factory.mktemp("faults-local"))


@dataclass
class Killed:
    """A trial whose worker was SIGKILLed from outside, rerun (``retries=1``), and the run cancelled
    while the rerun held: what the map raised, trial 0's attempts, their pids, the run's status."""

    raised: BaseException | None
    attempts: list[Any]
    pids: list[int]
    run_status: str
    folder: Path


@pytest.fixture(scope="module")
def killed(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Killed:
    folder = tmp_path_factory.mktemp(f"killed-{backend.name}")
    params = [{"x": 0, "folder": str(folder)}, {"x": 1, "folder": str(folder)}]
    with backend.runner(folder, policy=Policy(retries=1, peak_ratio=None)) as runner:
        thread, out = _run_in_thread(lambda: runner.map(ref("hold"), params, name="killed"))
        try:
            first = wait_for(lambda: list(folder.glob("started-0-*")), 120, "trial 0 to start")
            os.kill(int(first[0].read_text()), signal.SIGKILL)
            both = wait_for(lambda: _two(folder.glob("started-0-*")), 120, "the rerun to start")
            runner._interrupt()  # what the guarded pool's cancel and Ctrl-C do: the run stops
        finally:
            thread.join(120)
        run = runner.store.get_run("killed")
        attempts = sorted(runner.store.attempts(run.run_id, 0), key=lambda a: a.attempt)
    pids = [int(m.read_text()) for m in sorted(both, key=lambda m: m.stat().st_mtime_ns)]
    return Killed(out.get("error"), attempts, pids, run.status, folder)


def _two(found: Iterator[Path]) -> list[Path] | None:
    marks = list(found)
    return marks if len(marks) == 2 else None


def _run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised by the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def _slurm_queue(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if f"trainguard-{name}" in line]


class TestBackendContract:
    """Each backend keeps the same contract with the session (see the module docstring)."""

    def test_results_equal_the_local_backends(self, faults: Faults, local: Faults) -> None:
        for name in ("echo0", "echo1", "echo2", "echo3"):
            result, expected = faults.results[name], local.results[name]
            assert result.status == "ok", (name, result.error)
            assert {**result.value, "pid": 0} == {**expected.value, "pid": 0}  # seeded draws included
            assert result.peak_rss_bytes and result.peak_rss_bytes > 5 * MIB  # samples reached the driver

    def test_an_exception_fails_the_trial_with_its_message(self, faults: Faults) -> None:
        error = faults.results["boom"].error
        assert faults.results["boom"].status == "failed"
        assert field(error, "status") == "exception" and field(error, "type").endswith("ValueError")
        assert "boom 3 from the trial" in field(error, "message")

    def test_a_worker_that_exits_is_a_crash_in_the_local_words(self, faults: Faults, local: Faults) -> None:
        error, expected = faults.results["exit_hard"].error, local.results["exit_hard"].error
        assert field(error, "status") == "crashed" and field(error, "exitcode") == 7
        assert shape(field(error, "message")) == shape(field(expected, "message"))

    def test_a_memory_kill_is_the_local_status_and_message(self, faults: Faults, local: Faults) -> None:
        result, expected = faults.results["alloc"], local.results["alloc"]
        assert result.status == "failed" and field(result.error, "status") == "killed_memory"
        assert field(result.error, "limit_bytes") == LIMIT and "memory_limit" in field(
            result.error, "message"
        )
        assert shape(field(result.error, "message")) == shape(field(expected.error, "message"))
        assert faults.attempts[FAULTS.index("alloc")].status == "killed_memory"
        assert result.peak_rss_bytes >= LIMIT

    @pytest.mark.skipif(not SHM, reason="/dev/shm has less than 600 MiB free")
    def test_a_tmpfs_write_is_the_local_memory_kill(self, faults: Faults, local: Faults) -> None:
        error, expected = faults.results["fill_shm"].error, local.results["fill_shm"].error
        assert field(error, "status") == "killed_memory" and "shmem/tmpfs" in field(error, "message")
        assert shape(field(error, "message")) == shape(field(expected, "message"))
        assert field(error, "tmpfs_bytes") > 100 * MIB  # the split the verdict read reached the driver

    def test_a_timeout_is_the_local_status_and_message(self, faults: Faults, local: Faults) -> None:
        result, expected = faults.results["hold"], local.results["hold"]
        assert field(result.error, "status") == "timeout"
        assert shape(field(result.error, "message")) == shape(field(expected.error, "message"))
        assert result.duration_s >= 2.0  # it ran its full timeout; how soon after it ends is a bench's

    def test_each_worker_ends_as_a_local_one_and_recycles_after_two_trials(
        self, backend: Backend, faults: Faults, local: Faults
    ) -> None:
        assert [w.reason for w in faults.workers] == ENDS == [w.reason for w in local.workers]
        first = faults.workers[0]
        assert first.detail["rule"] == "max_trials" and first.detail["trials"] == 2
        assert "max_trials_per_worker=2" in first.reason_text
        pids = [faults.results[name].value["pid"] for name in ("echo0", "echo1", "echo2", "echo3")]
        assert pids[0] == pids[1] != pids[2] != pids[3]
        assert {w.config.get("backend", "local") for w in faults.workers} == {backend.name}

    def test_nothing_is_left_once_the_runner_closed(self, backend: Backend, faults: Faults) -> None:
        pids = [w.pid for w in faults.workers]
        agents = [w.config["agent_pid"] for w in faults.workers if w.config.get("agent_pid")]
        wait_gone(pids + agents, 60, "every worker (and node agent) of the closed Runner to end")
        if backend.name == "slurm":
            wait_for(lambda: _slurm_queue("faults") == [], 60, "the run's pilot jobs to leave the queue")

    def test_a_worker_killed_from_outside_is_recorded_and_rerun(self, killed: Killed) -> None:
        first, second = killed.attempts
        assert first.status == "crashed" and "SIGKILL from outside trainguard" in field(
            first.error, "message"
        )
        assert second.attempt == 2 and killed.pids[0] != killed.pids[1]  # retries=1: run again, anew

    def test_on_error_stop_stops_dispatching(self, backend: Backend, tmp_path: Path) -> None:
        params = [{"x": 0}, {"x": 1}, {"x": 2}, {"x": 3}]
        with backend.runner(tmp_path, policy=Policy(on_error="stop", peak_ratio=None)) as runner:
            with pytest.raises(TrialError, match="on_error='stop'") as info:
                runner.map(ref("boom"), params, name="stopper")
            run = runner.store.get_run("stopper")
            attempts = runner.store.attempts(run.run_id)
        stopped: Any = info.value  # the TrialError names the trial and its cause
        assert stopped.status == "exception" and stopped.index == 0
        assert [a.index for a in attempts] == [0] and run.status == "stopped"

    def test_a_cancelled_run_ends_its_running_worker(self, killed: Killed) -> None:
        assert isinstance(killed.raised, KeyboardInterrupt), killed.raised
        wait_gone(killed.pids, 60, "the cancelled trial's worker to end")
        assert killed.run_status == "interrupted" and killed.attempts[1].status == "interrupted"
        assert not list(killed.folder.glob("started-1-*"))  # the queued trial never started
