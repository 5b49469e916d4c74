"""Tiny trial functions for the runner's process tests, loaded by the workers as 'runner_trials.py:fn'."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_LEAK: list[bytearray] = []


def echo(params):
    time.sleep(params.get("sleep_s", 0.0))
    return {"x": params.get("x"), "pid": os.getpid()}


def env(params):
    names = params["names"]
    time.sleep(params.get("sleep_s", 0.0))
    return {
        "env": {n: os.environ.get(n) for n in names},
        "modules": sorted(m for m in ("numpy", "tensorflow", "torch", "keras") if m in sys.modules),
        "pid": os.getpid(),
    }


def imported(params):
    """What the worker has imported by the time a trial runs: its own modules, none of the driver's."""
    return sorted(m for m in sys.modules if m.startswith(("trainguard", "numpy", "sqlite3", "cloudpickle")))


def fault(params):
    kind = params["kind"]
    if kind == "ok":
        return {"ok": True, "pid": os.getpid()}
    if kind == "raise":
        raise RuntimeError("boom from the trial")
    if kind == "segv":
        ctypes.string_at(0)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(120)
    if kind == "alloc":
        chunks = []
        for _ in range(200):
            chunks.append(bytearray(10 * 2**20))
            time.sleep(0.02)
        return {"chunks": len(chunks)}
    if kind == "not_json":
        return {"value": object()}
    if kind == "memory_error":
        raise MemoryError("cannot allocate")
    if kind == "exit":
        os._exit(3)
    raise ValueError(f"unknown kind {kind}")


def exit_unreaped(params):
    """Exit while a detached grandchild keeps the worker's pipe open for ``linger_s``: the supervisor
    sees no EOF yet, so the dead worker stays an unreaped zombie that long while it is sampled."""
    first = os.fork()
    if first == 0:
        if os.fork() == 0:  # the grandchild, re-parented away from the worker's tree at once
            time.sleep(params.get("linger_s", 0.3))
        os._exit(0)
    os.waitpid(first, 0)
    os._exit(3)


def import_noisy(params):
    import runner_noisy  # noqa: F401 - writes TensorFlow-like start-up lines to fd 2

    os.write(2, b"trial says: a real error line\n")
    return {"pid": os.getpid()}


def flaky(params):
    """Crashes (segfault) on the first attempt, succeeds on the next: a marker file remembers."""
    marker = Path(params["marker"])
    if not marker.exists():
        marker.write_text("crashed once")
        ctypes.string_at(0)
    return {"ok": True}


def leak(params):
    """Keeps ``mb`` MiB alive per call in this worker, like a framework that leaks per fit."""
    block = bytearray(params.get("mb", 20) * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page so RSS shows it
    _LEAK.append(block)
    return {"held_mib": sum(len(b) for b in _LEAK) >> 20, "pid": os.getpid()}


def spawn_child(params):
    """Start a long-sleeping child process, note its pid in a file, then return or crash."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(params["pid_file"]).write_text(str(child.pid))
    time.sleep(0.3)  # long enough for the supervisor's sampler to see the child
    if params.get("crash"):
        ctypes.string_at(0)
    return {"child": child.pid}


def hold(params):
    """Hold ``mb`` MiB (every page touched) for ``hold_s`` seconds, then free it: a trial whose
    peak is known and whose memory leaves with it."""
    block = bytearray(b"\x01") * (params.get("mb", 100) * 2**20)
    time.sleep(params.get("hold_s", 0.3))
    del block
    return {"pid": os.getpid()}


def base_and_leak(params):
    """Like a framework: a large first allocation kept for the worker's life, then ``mb`` MiB
    leaked per call."""
    if not _LEAK:
        _LEAK.append(bytearray(b"\x01") * (params.get("base_mb", 200) * 2**20))
    _LEAK.append(bytearray(b"\x01") * (params.get("mb", 8) * 2**20))
    return {"pid": os.getpid()}


def ramp(params):
    """Grow to ``mb`` MiB in ``step_mb`` steps every ``step_s`` seconds, hold ``hold_s``, free: a
    trial whose memory rises at a known rate, after ``delay_s``. With ``barrier`` (a folder), the ramp starts once
    ``parties`` trials have reached it (a file each), so that trials of two workers rise together."""
    _barrier(params)
    time.sleep(params.get("delay_s", 0))
    blocks = []
    step = params.get("step_mb", 5) * 2**20
    for _ in range(params.get("mb", 100) // params.get("step_mb", 5)):
        blocks.append(bytearray(b"\x01") * step)
        time.sleep(params.get("step_s", 0.02))
    time.sleep(params.get("hold_s", 0.5))
    del blocks
    return {"pid": os.getpid()}


def _barrier(params):
    barrier = params.get("barrier")
    if barrier:
        Path(barrier, f"{os.getpid()}-{params.get('tag', '')}").touch()
        deadline = time.monotonic() + params.get("barrier_timeout_s", 60)
        while len(os.listdir(barrier)) < params.get("parties", 2) and time.monotonic() < deadline:
            time.sleep(0.02)


def ramp_or_base(params):
    """:func:`base_and_leak` (after the barrier, if any) when ``base_mb`` is given, else :func:`ramp`."""
    if "base_mb" not in params:
        return ramp(params)
    _barrier(params)
    return base_and_leak(params)


def channel(params):
    """What the worker's two channel ends are (``sys.argv[1:3]``): sockets or pipes (POSIX)."""
    import stat

    if sys.platform == "win32":  # socket handles, not CRT fds: fstat cannot tell
        return {"kinds": None, "pid": os.getpid(), "payload": "a" * params.get("size", 0)}
    kinds = ["socket" if stat.S_ISSOCK(os.fstat(int(a)).st_mode) else "pipe" for a in sys.argv[1:3]]
    return {"kinds": kinds, "pid": os.getpid(), "payload": "a" * params.get("size", 0)}


def pid_then_sleep(params):
    """Write this worker's pid to ``pid_file``, then sleep ``sleep_s`` (a trial to orphan)."""
    Path(params["pid_file"]).write_text(str(os.getpid()))
    time.sleep(params.get("sleep_s", 60))
    return {"pid": os.getpid()}
