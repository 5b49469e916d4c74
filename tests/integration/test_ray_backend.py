"""The Ray backend on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``:
a head and two more nodes, each its own raylet), with real worker processes and a real store.

One cluster serves the module (starting one costs ~10 s); the test that removes a node runs last
and adds a node back. Skipped only when ray is not installed (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from _waits import wait_for

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from trainguard.exceptions import ConfigError, MissingDependencyError  # noqa: E402
from trainguard.runner import Policy, RayBackend, Runner  # noqa: E402
from trainguard.store import Store  # noqa: E402

HERE = Path(__file__).parent
TRIALS = str(HERE / "ray_trials.py")
NODE_ARGS = {"num_cpus": 2, "object_store_memory": 80 * 2**20}


def ref(name: str) -> str:
    return f"{TRIALS}:{name}"


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "resources": {"head": 1}})
    try:
        c.add_node(**NODE_ARGS, resources={"spare": 1})
        c.add_node(**NODE_ARGS, resources={"spare": 1})
        c.wait_for_nodes()
        ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _head_node_id(cluster) -> str:
    return cluster.head_node.node_id


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


# -- runs -------------------------------------------------------------------------------------------


def test_run_spreads_over_nodes_and_equals_the_local_backend(cluster, tmp_path):
    params = [{"x": i, "sleep_s": 0.3} for i in range(9)]
    with Runner(workers=3, backend="ray", store=tmp_path / "r.db", seed=7) as runner:
        on_ray = runner.map(ref("draw"), params, name="sweep")
        store = runner.store
        run = store.get_run("sweep")
        workers = store.workers(run.run_id)
    # each slot's actor removed its capture folder when the run ended (empty ones were left before);
    # looked at before the next run, whose start sweeps the folders of actors that are gone
    agents = {w.config["agent_pid"] for w in workers}
    left = [p for a in agents for p in glob.glob(f"{tempfile.gettempdir()}/trainguard-ray-{a}-*")]
    # the same values as the local backend's: tests/contract/test_backend_contract.py
    assert [r.status for r in on_ray] == ["ok"] * 9
    nodes = {w.config["node_id"] for w in workers}
    assert len(nodes) == 3, workers  # one slot per node: SPREAD scheduling
    assert len(agents) == 3 and left == [], left
    assert all(w.config["backend"] == "ray" and w.config["tree_tracking"] for w in workers)
    assert all(w.config["threads"] == 1 for w in workers)  # the slot's one CPU, not cores // workers
    # samples from the nodes reached the driver's store
    assert all(r.peak_rss_bytes and r.peak_rss_bytes > 5 * 2**20 for r in on_ray)
    assert Store(tmp_path / "r.db").samples(run.run_id)


def test_driver_killed_mid_run_resumes_from_its_store(cluster, tmp_path):
    """The CLI drives a run on the cluster and is SIGKILLed mid-run: its workers end with it, and a
    new driver resumes the run by name from the store, rerunning only what was unfinished."""
    folder = tmp_path / "hold"
    folder.mkdir()
    db = tmp_path / "r.db"
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        f"- {{x: 0, folder: '{folder}', quick: true}}\n"
        + "".join(f"- {{x: {i}, folder: '{folder}'}}\n" for i in (1, 2))
    )
    argv = [
        sys.executable,
        "-m",
        "trainguard",
        "run",
        ref("hold"),
        "--params",
        str(grid),
        "--store",
        str(db),
        "--name",
        "resumed",
        "--workers",
        "2",
        "--backend",
        "ray",
        "--address",
        cluster.address,
        "--no-progress",
    ]
    driver = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: len(list(folder.glob("started-*"))) == 3, 90, "three trials to start")
        holding = [
            int(m.read_text()) for m in folder.glob("started-*") if not m.name.startswith("started-0-")
        ]
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    # the node-local supervisors die with their driver, and the workers they ran with them
    wait_for(lambda: not any(_alive(pid) for pid in holding), 60, "the holding workers to end")
    (folder / "release").write_text("")
    with Runner(workers=2, backend="ray", store=db) as runner:
        results = runner.map(ref("hold"), _yaml_params(grid), name="resumed")
    assert [r.status for r in results] == ["ok"] * 3
    assert [r.reused for r in results] == [True, False, False]
    assert [r.attempts for r in results][1:] == [2, 2]  # the interrupted attempt counts


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _yaml_params(path: Path) -> list[dict]:
    import yaml

    return yaml.safe_load(path.read_text())


def test_bad_input_resources_no_node_has(cluster, tmp_path):
    with Runner(backend=RayBackend(resources={"CPU": 1, "GPU": 1}), store=tmp_path / "r.db") as runner:
        with pytest.raises(
            ConfigError, match=r"no node of the Ray cluster .*GPU=1 \(the most any node has is 0\)"
        ):
            runner.map(ref("where"), [{"x": 0}])
    with Runner(backend=RayBackend(resources="CPU=3"), store=tmp_path / "r.db") as runner:
        with pytest.raises(ConfigError, match=r"CPU=3 \(the most any node has is 2\)"):
            runner.map(ref("where"), [{"x": 0}])
    assert Store(tmp_path / "r.db").list_runs() == []  # refused before any run was recorded


def test_bad_input_function_or_data_that_cannot_be_shipped(cluster, tmp_path):
    # a module only the driver can import (its folder is not on the path the workers get)
    folder = tmp_path / "only_here"
    folder.mkdir()
    (folder / "tg_driver_only.py").write_text("def train(params):\n    return 1\n")
    sys.path.insert(0, str(folder))
    try:
        import tg_driver_only
    finally:
        sys.path.remove(str(folder))
    try:
        with Runner(backend="ray", store=None) as runner:
            with pytest.raises(
                ConfigError, match=r"cannot be shipped to the Ray cluster: on node .*tg_driver_only"
            ):
                runner.map(tg_driver_only.train, [{"x": 0}])
            np = pytest.importorskip("numpy")
            with pytest.raises(ConfigError, match=r"data= .* cannot be shipped to Ray nodes"):
                runner.map(ref("where"), [{"x": 0}], data={"a": np.zeros(3)})
            lock = threading.Lock()
            with pytest.raises(ConfigError, match="cannot be pickled"):
                runner.map(lambda p: lock.locked(), [{"x": 0}])
    finally:
        sys.modules.pop("tg_driver_only", None)


def test_bad_input_ray_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=r"pip install -e '\.\[ray\]'"):
        Runner(backend="ray", store=None)


def test_bad_input_address_with_no_cluster_says_so(tmp_path):
    # a fresh process: this one is connected to the test cluster already
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "run",
            ref("where"),
            "--backend",
            "ray",
            "--address",
            "127.0.0.1:9",
            "--store",
            str(tmp_path / "r.db"),
            "--no-progress",
            "--params",
            str(_params_file(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no Ray cluster at 127.0.0.1:9" in lines[0], proc.stderr


def _params_file(tmp_path: Path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text("- {x: 0}\n")
    return path


# -- joining a `ray start --head` by HOST:PORT ------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _end_ray_processes(head: subprocess.Popen, temp_dir: str) -> None:
    """Stop the head this test started: its `ray start --block` process group, then any process of
    that Ray session left (each names the session's own temp dir on its command line)."""
    import psutil

    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(timeout=20)
    mine = {os.getpid()}
    left = [
        p
        for p in psutil.process_iter(["pid", "cmdline"])
        if p.info["pid"] not in mine and any(temp_dir in (part or "") for part in (p.info["cmdline"] or []))
    ]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                child.kill()
            proc.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)
    head.wait(timeout=10)
    psutil.wait_procs(left, timeout=10)
    shutil.rmtree(temp_dir, ignore_errors=True)  # the session's logs and sockets go with it


@pytest.fixture
def token_head(tmp_path):
    """A real `ray start --head --port PORT` with token authentication (what Ray 2.60 starts by
    default once a token exists on the machine), and the token; stopped afterwards."""
    import tempfile

    port = _free_port()
    token = "trainguard-test-" + os.urandom(12).hex()
    temp_dir = tempfile.mkdtemp(prefix="tg-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    log = tmp_path / "head.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    ray_cli = str(Path(sys.executable).with_name("ray"))
    argv = [ray_cli, "start", "--head", "--port", str(port), "--num-cpus", "1", "--temp-dir", temp_dir]
    argv += ["--include-dashboard=false", "--disable-usage-stats", "--block"]
    with open(log, "w") as out:
        head = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for(
            lambda: "Ray runtime started" in log.read_text() or head.poll() is not None,
            120,
            "the Ray head to start",
        )
        assert head.poll() is None, log.read_text()[-3000:]
        yield f"127.0.0.1:{port}", token
    finally:
        _end_ray_processes(head, temp_dir)


def _run_cli(tmp_path: Path, address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "trainguard", "run", ref("where"), "--backend", "ray", "--address"]
    argv += [address, "--store", str(tmp_path / "r.db"), "--no-progress", "--json"]
    argv += ["--params", str(_params_file(tmp_path))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)


def test_joins_a_ray_start_head_by_host_and_port(token_head, tmp_path):
    address, token = token_head
    # a driver that has the head's token but no RAY_AUTH_MODE (as on a machine where `ray start`
    # found ~/.ray/auth_token): Ray itself uses the token only for address="auto"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_AUTH_TOKEN"] = token
    proc = _run_cli(tmp_path, address, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Store(tmp_path / "r.db", readonly=True) as store:
        (summary,) = store.list_runs()
        assert (summary.trials_ok, summary.status) == (1, "completed")
    # without any token: one line that says what to do, at once
    env = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN"}
    env["HOME"] = str(tmp_path / "home")  # no ~/.ray/auth_token there
    (tmp_path / "none").mkdir()
    proc = _run_cli(tmp_path / "none", address, env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and "requires token authentication" in lines[0], proc.stderr
    assert "RAY_AUTH_TOKEN" in lines[0]


def test_bad_input_an_address_other_than_the_connected_cluster(cluster, tmp_path):
    # this process is connected to the test cluster (ray.init in the fixture): another address
    # would be ignored, so it is refused; the connected cluster's own address, or a loopback name
    # for it, is fine
    with pytest.raises(ConfigError, match=r"already connected to the Ray cluster at .*ray.shutdown\(\)"):
        with Runner(backend=RayBackend(address="127.0.0.1:9"), store=None) as runner:
            runner.map(ref("where"), [{"x": 0}])
    port = cluster.address.rpartition(":")[2]
    for address in (cluster.address, f"127.0.0.1:{port}"):
        with Runner(backend=RayBackend(address=address), store=None) as runner:
            (result,) = runner.map(ref("where"), [{"x": 0}])
        assert result.ok, result.error
    # the older keywords reach the same cluster, and say to write RayBackend(...)
    with pytest.warns(
        DeprecationWarning, match=r"trainguard\.RayBackend\(address=\.\.\., resources=\.\.\.\)"
    ):
        runner = Runner(backend="ray", address=cluster.address, resources={"CPU": 1}, store=None)
    with runner:
        (result,) = runner.map(ref("where"), [{"x": 0}])
    assert result.ok, result.error


# -- node loss (last: it changes the cluster) -------------------------------------------------------


def test_node_removed_mid_run_is_recorded_and_its_trial_rerun(cluster, tmp_path):
    folder = tmp_path / "hold"
    folder.mkdir()
    db = tmp_path / "r.db"
    policy = Policy(retries=1)
    runner = Runner(workers=3, backend="ray", store=db, policy=policy)
    params = [{"x": i, "folder": str(folder)} for i in range(3)]
    thread, out = _run_in_thread(lambda: runner.map(ref("hold"), params, name="loss"))
    wait_for(lambda: len(list(folder.glob("started-*"))) == 3, 60, "three trials to start")
    store = Store(db)
    run_id = store.get_run("loss").run_id
    by_pid = {w.pid: w for w in store.workers(run_id)}
    victim_pid = None
    for marker in folder.glob("started-*"):
        worker = by_pid[int(marker.read_text())]
        if worker.config["node_id"] != _head_node_id(cluster):
            victim_index, victim_pid, victim_node = (
                int(marker.name.split("-")[1]),
                worker.pid,
                worker.config["node_id"],
            )
            break
    assert victim_pid is not None
    node = next(n for n in cluster.list_all_nodes() if n.node_id == victim_node)
    cluster.remove_node(node)
    try:
        wait_for(
            lambda: any(a.status == "crashed" for a in store.attempts(run_id, victim_index)),
            60,
            "the crashed attempt row",
        )
        (folder / "release").write_text("")
        thread.join(90)
        runner.close()
        assert "error" not in out, out
        results = out["value"]
        assert [r.status for r in results] == ["ok"] * 3
        assert results[victim_index].attempts == 2
        first = store.attempts(run_id, victim_index)[0]
        assert first.status == "crashed" and "node" in first.error.message and "lost" in first.error.message
        lost = [w for w in store.workers(run_id) if w.reason == "node_lost"]
        assert [w.config["node_id"] for w in lost] == [victim_node]
    finally:
        cluster.add_node(**NODE_ARGS, resources={"spare": 1})
