"""The Slurm backend on a shared machine (issue 34): another user (``nobody``, through setpriv)
attacks a live run on a real one-node Slurm. The run's folders and files are private, the driver
listens on one address, its wire parses JSON and never unpickles what a peer sends, a planted
folder is refused, and a run of the same name in another store leaves the first run's pilots alone.
"""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.runner import Runner, SlurmBackend  # noqa: E402
from trainguard.store import Store  # noqa: E402

HERE = Path(__file__).parent
TRIALS = str(HERE / "slurm_trials.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

needs_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to act as nobody"
)


def ref(name: str) -> str:
    return f"{TRIALS}:{name}"


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _wait_for(predicate, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


@pytest.fixture
def shared_tmp():
    """A world-writable sticky folder like /tmp, where nobody can plant names."""
    path = Path(tempfile.mkdtemp(prefix="tg-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class _Evil:
    """A pickle that, unpickled, leaves a file: what a peer would send to run code in the driver."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


def _live_run(runner, marks: Path, name: str, count: int = 2):
    params = [{"x": i, "sleep_s": 6, "folder": str(marks)} for i in range(count)]
    out: dict = {}

    def target():
        try:
            out["value"] = runner.map(ref("job"), params, name=name)
        except BaseException as err:  # noqa: BLE001 - re-raised by the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    _wait_for(lambda: list(marks.glob("started-*")))
    return thread, out


@needs_nobody
def test_another_user_cannot_read_the_run_nor_make_the_driver_unpickle(slurm, shared_tmp, tmp_path):
    marks = shared_tmp / "marks"
    marks.mkdir()
    marks.chmod(0o777)
    root = shared_tmp / "slurm"
    runner = Runner(workers=1, backend=SlurmBackend(folder=str(root), time=10), store=tmp_path / "s.db")
    thread, out = _live_run(runner, marks, "private")
    backend = runner._backend
    pickles = list(root.rglob("*_submitted.pkl"))
    assert pickles
    # nobody reads neither the folders nor the pickle (which holds the token)
    assert as_nobody("ls", str(root)).returncode != 0
    assert as_nobody("cat", str(pickles[0])).returncode != 0
    # the driver listens on the address the pilot needs, not on every interface
    import psutil

    host, port = backend._address
    listening = [
        c.laddr
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert listening and all(addr.ip not in ("0.0.0.0", "::") for addr in listening), listening
    # nobody, without the token, connects and sends a pickle: refused at the challenge
    mark_nobody = shared_tmp / "pwned-nobody"
    forged = shared_tmp / "forged.pkl"
    forged.write_bytes(pickle.dumps(("hello", {"pilot": 0, "x": _Evil(str(mark_nobody))})))
    script = (
        "import socket,sys,struct;s=socket.create_connection((sys.argv[1],int(sys.argv[2])),5);"
        "d=open(sys.argv[3],'rb').read();s.sendall(struct.pack('!i',len(d))+d);s.settimeout(5)\n"
        "try: s.recv(100)\nexcept Exception: pass"
    )
    as_nobody(shutil.which("python3") or "python3", "-c", script, host, str(port), str(forged))
    # even a peer holding the token (here: this test) gets no pickle unpickled: the wire is JSON
    from multiprocessing.connection import Client

    mark_token = shared_tmp / "pwned-token"
    with Client((host, port), authkey=backend._token) as conn:
        conn.send(("hello", {"pilot": 0, "x": _Evil(str(mark_token))}))
        with pytest.raises((EOFError, OSError)):
            conn.recv_bytes()
    thread.join(240)
    runner.close()
    assert "error" not in out, out
    assert [r.status for r in out["value"]] == ["ok", "ok"]
    assert not mark_nobody.exists() and not mark_token.exists()
    # every folder of the run 0700, every file 0600, all ours
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        assert st.st_uid == os.geteuid(), path
        if stat.S_ISLNK(st.st_mode):
            continue  # submitit's link to its script: a link's mode means nothing, the folder guards it
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        assert stat.S_IMODE(st.st_mode) == want, (path, oct(st.st_mode))


@needs_nobody
def test_a_planted_slurm_folder_is_refused_in_one_line(shared_tmp, tmp_path):
    if shutil.which("sbatch") is None:
        pytest.skip("needs sbatch on PATH")
    planted = shared_tmp / "trainguard-slurm"
    assert as_nobody("mkdir", "-m", "0777", str(planted)).returncode == 0
    runner = Runner(backend=SlurmBackend(folder=str(planted)), store=tmp_path / "s.db")
    with pytest.raises(ConfigError) as err:
        runner.map(ref("draw"), [{"x": 1}], name="planted")
    runner.close()
    message = str(err.value)
    assert "\n" not in message and "owned by uid 65534 (nobody)" in message and "remove it" in message
    assert Store(tmp_path / "s.db").get_run("planted") is None
    assert not list(planted.iterdir())  # nothing of ours went in
    # a folder of ours that every user may write is refused too
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    runner = Runner(backend=SlurmBackend(folder=str(open_folder)), store=tmp_path / "s.db")
    with pytest.raises(ConfigError, match=r"its mode 0777 lets every user write it"):
        runner.map(ref("draw"), [{"x": 1}], name="open")
    runner.close()


def test_a_folder_that_cannot_be_made_is_one_line_before_work(tmp_path):
    if shutil.which("sbatch") is None:
        pytest.skip("needs sbatch on PATH")
    runner = Runner(backend=SlurmBackend(folder="/proc/nope"), store=tmp_path / "s.db")
    with pytest.raises(
        ConfigError, match=r"slurm folder=/proc/nope cannot hold the pilot jobs: it cannot be made"
    ):
        runner.map(ref("draw"), [{"x": 1}], name="proc")
    runner.close()
    assert Store(tmp_path / "s.db").get_run("proc") is None


def test_same_run_name_in_another_store_leaves_the_first_runs_pilots(slurm, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    first = Runner(
        workers=1, backend=SlurmBackend(folder=str(tmp_path / "a"), time=10), store=tmp_path / "a.db"
    )
    thread, out = _live_run(first, marks, "twin", count=1)
    with Runner(
        workers=1, backend=SlurmBackend(folder=str(tmp_path / "b"), time=10), store=tmp_path / "b.db"
    ) as second:
        other = second.map(ref("draw"), [{"x": 1}], name="twin")
        cancelled = second._backend.cancelled_orphans
    thread.join(240)
    first.close()
    assert cancelled == []
    assert "error" not in out, out
    assert [(r.status, r.attempts) for r in out["value"]] == [("ok", 1)]
    assert other[0].status == "ok"


def test_a_pickled_function_reaches_the_pilot_from_its_private_pickle_alone(slurm, tmp_path):
    """A function that is not importable (a closure) is cloudpickled: the wire carries only its
    digest, and the pilot runs the copy in its job's private pickle."""
    offset = 5

    def closure(params):
        return params["x"] + offset

    with Runner(
        workers=1, backend=SlurmBackend(folder=str(tmp_path / "s"), time=10), store=tmp_path / "s.db"
    ) as r:
        results = r.map(closure, [{"x": 1}, {"x": 2}], name="closure")
    assert [(res.status, res.value) for res in results] == [("ok", 6), ("ok", 7)]
