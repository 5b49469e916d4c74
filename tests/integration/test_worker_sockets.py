"""A worker started over the socket channel (what Windows uses, ``runner._channel``), end to end.

On Linux ``LocalBackend(channel="sockets")`` runs the same socket pairs, ``Connection`` over a
socket, non-blocking socket reader and ``select`` + peek hang-up watch that Windows runs; only
the handle list and the process-handle watch differ there. The ``windows`` case runs the
platform's own start (sockets, the Job Object tier) and has not run on this project's machines.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from _waits import wait_for
from trainguard.runner import Policy, Runner
from trainguard.runner.backends.local import LocalBackend

pytestmark = pytest.mark.portable  # the hosted macOS and Windows jobs run these too

TRIALS = str(Path(__file__).parent / "runner_trials.py")


@pytest.mark.parametrize(
    ("channel", "tier"),
    [("sockets", "portable"), pytest.param(None, "auto", marks=pytest.mark.windows)],
)
def test_trials_run_fail_and_end_over_the_socket_channel(channel, tier):
    policy = Policy(timeout="20s", peak_ratio=None)
    params = [{"size": 0}, {"size": 300_000}]  # one result several socket reads long
    with Runner(
        store=None, backend=LocalBackend(channel=channel), tree_tracking=tier, policy=policy
    ) as runner:
        small, large = runner.map(f"{TRIALS}:channel", params)
        faults = runner.map(f"{TRIALS}:fault", [{"kind": k} for k in ("raise", "exit", "ok")])
    assert small.status == "ok" and large.status == "ok", (small.error, large.error)
    if small.value["kinds"] is not None:
        assert small.value["kinds"] == ["socket", "socket"]
    assert len(large.value["payload"]) == 300_000
    assert [r.status for r in faults] == ["failed", "failed", "ok"]
    assert faults[0].error.status == "exception" and "boom from the trial" in faults[0].error.message
    assert faults[1].error.status == "crashed"  # the worker's death is seen as its socket's EOF


@pytest.mark.skipif(sys.platform == "win32", reason="pipes are the POSIX channel")
def test_the_default_channel_on_posix_is_still_the_pipes():
    with Runner(store=None, tree_tracking="auto") as runner:
        (result,) = runner.map(f"{TRIALS}:channel", [{}])
    assert result.value["kinds"] == ["pipe", "pipe"]


@pytest.mark.skipif(
    sys.platform == "win32", reason="SIGKILLs the supervisor (a Job Object ends it on Windows)"
)
def test_a_socket_channel_worker_ends_when_its_supervisor_is_killed_mid_trial(tmp_path):
    import os
    import signal
    import subprocess

    import psutil

    pid_file = tmp_path / "worker.pid"
    script = (
        "from trainguard.runner import Runner\n"
        "from trainguard.runner.backends.local import LocalBackend\n"
        "with Runner(store=None, backend=LocalBackend(channel='sockets'), tree_tracking='portable') as r:\n"
        f"    r.map({TRIALS + ':pid_then_sleep'!r}, [{{'pid_file': {str(pid_file)!r}}}])\n"
    )
    supervisor = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    wait_for(
        lambda: (pid_file.exists() and pid_file.read_text()) or supervisor.poll() is not None,
        120,
        "the trial to write its pid",
    )
    assert supervisor.poll() is None, "the supervisor ended before its trial started"
    worker = psutil.Process(int(pid_file.read_text()))
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait(10)
    worker.wait(10)  # psutil.TimeoutExpired if the hang-up watch missed the supervisor's death
