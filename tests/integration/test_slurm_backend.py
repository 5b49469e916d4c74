"""The Slurm backend on a real one-node Slurm (slurmctld and slurmd on this machine, started by
``scripts/slurm-local.sh`` when none answers, and stopped again at the end if this module started
it): real ``sbatch``, ``squeue``, ``scancel``, real pilot jobs submitted with submitit, real worker
processes inside them and a real store. Trials are tiny; the Keras comparison is in ``bench/``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner import Runner, SlurmBackend  # noqa: E402
from trainguard.store import Store  # noqa: E402

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
TRIALS = str(HERE / "slurm_trials.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def ref(name: str) -> str:
    return f"{TRIALS}:{name}"


def queue(name: str | None = None) -> list[str]:
    argv = ["squeue", "-h", "-o", "%i %j"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split("\n")
    return [line for line in out if line.strip() and (name is None or f"trainguard-{name}" in line)]


def options(tmp_path: Path, **extra) -> dict:
    return {"folder": str(tmp_path / "slurm"), "time": 10, **extra}


def slurm_backend(tmp_path: Path, **extra) -> SlurmBackend:
    """The tests' settings as the typed backend (the form ``options`` is the older dict of)."""
    return SlurmBackend.from_options(options(tmp_path, **extra))


def _run_in_thread(fn):
    out: dict[str, object] = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised by the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def _wait_for(predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


# -- runs -------------------------------------------------------------------------------------------


def test_sixteen_trials_over_two_pilots_equal_the_local_backend(slurm, tmp_path):
    params = [{"x": i, "sleep_s": 0.1} for i in range(16)]
    with Runner(workers=2, backend=slurm_backend(tmp_path), store=tmp_path / "s.db", seed=7) as runner:
        on_slurm = runner.map(ref("draw"), params, name="sweep")
        jobs = runner.map(ref("job"), [{"x": i, "sleep_s": 0.3} for i in range(4)], name="jobs")
        store = runner.store
        workers = store.workers(store.get_run("sweep").run_id)
        run_id = store.get_run("sweep").run_id
    # the same values as the local backend's: tests/contract/test_backend_contract.py
    assert [r.status for r in on_slurm] == ["ok"] * 16
    # every trial ran inside a Slurm job: two pilots, each with one worker
    assert {w.config["backend"] for w in workers} == {"slurm"}
    assert len({w.config["slurm_job"] for w in workers}) == 2, workers
    assert all(r.value["job"] for r in jobs) and len({r.value["job"] for r in jobs}) == 2
    # samples taken on the node reached the driver's store
    assert all(r.peak_rss_bytes and r.peak_rss_bytes > 5 * 2**20 for r in on_slurm)
    assert Store(tmp_path / "s.db").samples(run_id)
    assert queue("sweep") == [] and queue("jobs") == []


def test_pilot_scancelled_mid_run_its_trials_rerun_elsewhere(slurm, tmp_path):
    folder = tmp_path / "marks"
    folder.mkdir()
    params = [{"x": i, "sleep_s": 1.5, "folder": str(folder)} for i in range(6)]
    runner = Runner(workers=2, backend=slurm_backend(tmp_path), store=tmp_path / "s.db")
    thread, out = _run_in_thread(lambda: runner.map(ref("job"), params, name="cancel"))
    marks = _wait_for(lambda: list(folder.glob("started-*")), 120)
    victim = marks[0].read_text()
    subprocess.run(["scancel", victim], check=True)
    thread.join(240)
    runner.close()
    assert "error" not in out, out
    results = out["value"]
    assert [r.status for r in results] == ["ok"] * 6
    assert all(r.value["job"] != victim for r in results)  # what ran there ran again elsewhere
    store = Store(tmp_path / "s.db")
    run = store.get_run("cancel")
    lost = [a for a in store.attempts(run.run_id) if a.status == "crashed"]
    assert lost and all(a.error.detail["slurm_job"] == victim for a in lost)
    assert all(a.error.detail["slurm_state"] == "CANCELLED" and "cancelled" in a.error.message for a in lost)
    rerun = {a.index for a in lost}
    assert all(results[i].attempts == 2 for i in rerun)  # no retries were configured: a free rerun
    reasons = {w.config["slurm_job"]: w.reason for w in store.workers(run.run_id)}
    assert reasons[victim] == "pilot_lost"
    assert len(reasons) >= 3  # a replacement pilot was submitted while work remained
    assert queue("cancel") == []


def test_sigkilled_driver_resumes_and_cancels_the_pilots_it_no_longer_knows(slurm, tmp_path):
    """The CLI drives a run and is SIGKILLed mid-run: its running pilots end with their workers
    when the connection drops; one still queued (it asks for CPUs the node has no more of) would
    wait for a driver that is gone. The next driver of the run cancels it and resumes by name."""
    folder = tmp_path / "marks"
    folder.mkdir()
    db = tmp_path / "s.db"
    grid = tmp_path / "grid.yaml"
    grid.write_text("".join(f"- {{x: {i}, sleep_s: 3, folder: '{folder}'}}\n" for i in range(4)))
    argv = [
        sys.executable, "-m", "trainguard", "run", ref("job"), "--params", str(grid), "--store", str(db),
        "--name", "resumed", "--workers", "2", "--backend", "slurm", "--no-progress",
        "--slurm", f"folder={tmp_path / 'slurm'}", "--slurm", "time=10", "--slurm", "pilots=3",
        "--slurm", "cpus_per_task=3",
    ]  # fmt: skip
    driver = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for(lambda: len(list(folder.glob("started-*"))) >= 2, 120)
        pending = _wait_for(
            lambda: [ln.split()[0] for ln in queue("resumed") if _state(ln.split()[0]) == "PENDING"]
        )
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    assert pending
    with Runner(workers=2, backend=slurm_backend(tmp_path), store=db) as runner:
        results = runner.map(ref("job"), _params(grid), name="resumed")
        cancelled = runner._backend.cancelled_orphans
    assert [r.status for r in results] == ["ok"] * 4
    assert set(pending) <= set(cancelled)
    assert all(r.attempts == 2 for r in results[:2]) or any(r.attempts == 2 for r in results)
    assert queue("resumed") == []


def _state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
    return out.strip()


def _params(path: Path) -> list[dict]:
    import yaml

    return yaml.safe_load(path.read_text())


def test_pre_timeout_signal_moves_a_staged_trial_to_another_pilot(slurm, tmp_path):
    """Slurm's pre-timeout signal (sent here with scancel --signal=USR2, as Slurm does at
    ``signal_delay_s`` before the time limit): the trial leaves at its next checkpoint and goes
    on from it in a replacement pilot."""
    folder = tmp_path / "marks"
    folder.mkdir()
    params = [{"stages": 4, "sleep_s": 1.0, "folder": str(folder)}]
    runner = Runner(workers=1, backend=slurm_backend(tmp_path), store=tmp_path / "s.db")
    thread, out = _run_in_thread(lambda: runner.map(ref("staged"), params, name="staged"))
    first = _wait_for(lambda: [p.read_text() for p in folder.glob("stage-0")], 120)[0]
    subprocess.run(["scancel", "--signal=USR2", first], check=True)
    thread.join(240)
    runner.close()
    assert "error" not in out, out
    result = out["value"][0]
    assert result.status == "ok" and result.value["jobs"][0] == first
    assert result.value["jobs"][-1] != first  # resumed in the replacement
    store = Store(tmp_path / "s.db")
    attempts = store.attempts(store.get_run("staged").run_id)
    assert attempts[0].status == "staged"
    assert queue("staged") == []


def test_slurms_cgroup_oom_kill_of_a_worker_is_a_memory_kill(slurm, tmp_path):
    """A worker SIGKILLed while its pilot's output holds slurmstepd's oom-kill line is recorded as
    a memory kill, not a crash. This Slurm has no cgroup plugin (a container), so the trial writes
    Slurm's line itself and is SIGKILLed; the classification path is the real one."""
    with Runner(workers=1, backend=slurm_backend(tmp_path), store=tmp_path / "s.db") as runner:
        result = runner.map(ref("slurm_oom"), [{"x": 1}], name="oom")[0]
        store = runner.store
        worker = store.workers(store.get_run("oom").run_id)[0]
    assert result.status == "failed" and result.error.status == "os_oom"
    assert "Slurm's cgroup out-of-memory handler" in result.error.message
    assert "Detected 1 oom-kill event(s)" in result.error.detail["why"]
    assert worker.reason == "os_oom"
    assert queue("oom") == []


# -- bad input --------------------------------------------------------------------------------------


def test_bad_input_no_slurm_on_the_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no squeue
    runner = Runner(backend="slurm", store=tmp_path / "s.db")
    with pytest.raises(ConfigError, match=r"needs Slurm, and there is no sbatch/squeue on PATH here"):
        runner.map(ref("draw"), [{"x": 1}], name="none")
    runner.close()
    assert Store(tmp_path / "s.db").get_run("none") is None


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"partition": "nosuchpartition"}, "invalid partition specified: nosuchpartition"),
        ({"time": "10:00:00"}, "Requested time limit is invalid"),
    ],
)
def test_bad_input_sbatch_refuses_with_slurms_reason_before_any_trial(slurm, tmp_path, extra, reason):
    runner = Runner(backend=slurm_backend(tmp_path, **extra), store=tmp_path / "s.db")
    with pytest.raises(ConfigError, match="Slurm refuses the pilot job's options") as err:
        runner.map(ref("draw"), [{"x": 1}], name="refused")
    runner.close()
    assert reason in str(err.value) and "\n" not in str(err.value)
    assert Store(tmp_path / "s.db").get_run("refused") is None  # nothing queued
    assert queue("refused") == []


def test_bad_input_pilot_cannot_import_the_function_names_the_node(slurm, tmp_path, monkeypatch):
    """A module this driver imports from a folder the compute node does not have (here: a path
    relative to the driver's working folder, while the pilot runs in another one)."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "only_here_trials.py").write_text("def train(params):\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("mods")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    opts = options(tmp_path, additional_parameters={"chdir": str(elsewhere)})
    runner = Runner(backend=SlurmBackend.from_options(opts), store=tmp_path / "s.db")
    with pytest.raises(ConfigError, match="cannot be loaded in Slurm pilot job") as err:
        runner.map("only_here_trials:train", [{"x": 1}], name="noimport")
    runner.close()
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    assert f"on node {host}" in str(err.value) and "only_here_trials" in str(err.value)
    assert queue("noimport") == []


def test_bad_input_options_that_are_not_slurms(tmp_path):
    with pytest.raises(ConfigError, match="workers_per_pilot=0 must be a whole number >= 1"):
        SlurmBackend(workers_per_pilot=0)
    with pytest.raises(ConfigError, match="job_name= is set by trainguard"):
        SlurmBackend(options={"job_name": "x"})
    # the older dict says the same, with a DeprecationWarning naming SlurmBackend
    with (
        pytest.warns(DeprecationWarning, match=r"trainguard\.SlurmBackend"),
        pytest.raises(ConfigError, match="workers_per_pilot=0"),
    ):
        Runner(backend="slurm", slurm={"workers_per_pilot": 0})
    with pytest.raises(ConfigError, match="slurm= is for backend='slurm'"):
        Runner(slurm={"partition": "x"})
    if shutil.which("sbatch"):
        runner = Runner(backend=SlurmBackend(options={"partiton": "gpu"}), store=tmp_path / "s.db")
        with pytest.raises(ConfigError, match="partiton= is not an option of submitit's Slurm executor"):
            runner.map(ref("draw"), [{"x": 1}], name="typo")
        runner.close()


def test_the_tests_talk_to_their_own_cluster(slurm):
    """Every Slurm command here reaches the tests' private cluster (its config, its ports), not a
    Slurm the machine may run beside it (scripts/slurm-local.sh start's, a real one)."""
    conf = dict(
        line.split("=", 1)
        for line in Path(slurm).read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    shown = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    fields = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in shown.splitlines()) if v}
    assert fields["SLURM_CONF"] == str(slurm)
    assert fields["ClusterName"] == conf["ClusterName"] and fields["SlurmctldPort"] == conf["SlurmctldPort"]
