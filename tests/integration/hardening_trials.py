"""Trials that attack the runner: detached children, writes onto the worker's message channel,
huge results, side files that count executions. Loaded by workers as 'hardening_trials.py:fn'."""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path


def _detach(target) -> None:
    """Run ``target()`` in a grandchild that left the trial's tree (double fork and setsid)."""
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                target()
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(first, 0)  # the middle process exits at once: the grandchild is an orphan


def daemon_allocates(params):
    """A double-forked daemon allocates ``mb`` MB and sleeps; the trial itself stays small."""
    pid_file = Path(params["pid_file"])

    def daemon() -> None:
        pid_file.write_text(str(os.getpid()))
        block = bytearray(params["mb"] * 1_000_000)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(300)

    _detach(daemon)
    time.sleep(params.get("sleep_s", 30))
    return "the limit did not act"


def daemon_sleeps(params):
    """A double-forked daemon records its pid and sleeps; the trial sleeps too."""
    pid_file = Path(params["pid_file"])

    def daemon() -> None:
        pid_file.write_text(str(os.getpid()))
        time.sleep(300)

    _detach(daemon)
    time.sleep(params.get("sleep_s", 300))
    return "done"


def counted(params):
    """Append one line per execution to a side file, then wait for the ``gate`` file (when given;
    at most 120 s) and sleep ``sleep_s``."""
    with open(params["count_file"], "a") as fh:
        fh.write(f"{params['i']} {os.getpid()}\n")
    gate = params.get("gate")
    deadline = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(params.get("sleep_s", 0.0))
    return params["i"]


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path(self.path).write_text, ("code ran in the supervisor",))


def _channel_fd() -> int:
    return int(sys.argv[2])  # python -m trainguard.runner.worker.process READ_FD WRITE_FD


def write_garbage(params):
    """Write onto the worker's message channel: garbage, a pickle, or a huge frame header."""
    fd = _channel_fd()
    kind = params["kind"]
    if kind == "garbage":
        os.write(fd, b"\x00\x00\x00\x10this is garbage!")
    elif kind == "pickle":
        data = pickle.dumps(_Marker(params["marker"]))
        os.write(fd, len(data).to_bytes(4, "big") + data)
    elif kind == "huge_header":
        os.write(fd, (2**31 - 1).to_bytes(4, "big") + b"{")
    return "wrote"


def big_result(params):
    return "x" * params["n"]


def echo(params):
    time.sleep(params.get("sleep_s", 0.0))
    return {"x": params.get("x"), "pid": os.getpid()}
