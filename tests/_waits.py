"""Waiting on events in tests: a store row, a file, a line, a process state; and the processes a
block of code started.

A test waits for the thing it needs to have happened, never for a length of time: a sleep is too
short on a loaded machine and wasted time on an idle one. The timeout is only a backstop for an
event that never comes, so it is generous; reaching it is a failure that says what never happened.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# how often a predicate is re-evaluated: short enough to add little to a test, long enough to leave
# the process under watch the CPU on a 2-core machine
POLL_S = 0.05


class WaitTimeout(AssertionError):
    """The awaited event did not happen within the timeout (an ``AssertionError``: the test fails)."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: str,
    *,
    poll_s: float = POLL_S,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    Args:
        predicate: called until truthy; its value is returned (a row, a pid list, True).
        timeout_s: the backstop; generous, since only an event that never comes should reach it.
        what: the event in words, for the failure message ("the worker's pid file").
        poll_s: the pause between evaluations.
        ignore: exceptions that mean "not yet" (the store file not created yet, say).

    Raises:
        WaitTimeout: the predicate stayed falsy for ``timeout_s``; the message names ``what`` and the
            last value or exception seen.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as e:
            value, last = None, e
        else:
            last = value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g} s waiting for {what} (last seen: {last!r})")
        time.sleep(poll_s)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process: a zombie (dead, not yet reaped) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in (b"Z", b"X")


def wait_gone(pids: Iterable[int], timeout_s: float, what: str) -> None:
    """Wait until none of ``pids`` is alive (exited, or a zombie awaiting its parent)."""
    pending = list(pids)
    wait_for(lambda: not [p for p in pending if pid_alive(p)], timeout_s, what)


def wait_file(path: str | os.PathLike[str], timeout_s: float, what: str) -> str:
    """Wait until ``path`` exists with some text in it, and return the text."""
    p = Path(path)
    return wait_for(lambda: p.read_text() if p.exists() else None, timeout_s, what, ignore=(OSError,))


# -- what a piece of code started ---------------------------------------------------------------------

_RECORDING: list[list[str]] = []  # the lists the audit hook appends to, innermost last
_HOOKED: list[bool] = []
_START_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec")


def _on_audit(event: str, args: tuple[object, ...]) -> None:
    if not _RECORDING or event not in _START_EVENTS:
        return
    argv = args[1] if len(args) > 1 else args
    if isinstance(argv, (list, tuple)) and argv and Path(str(argv[0])).name == "ldconfig":
        return  # ctypes.util.find_library's look-up of a shared library: a question, not work
    _RECORDING[-1].append(f"{event} {argv!r}")


@contextmanager
def process_starts() -> Iterator[list[str]]:
    """The processes started while the block runs, seen through Python's audit events (every worker,
    child and command goes through ``subprocess.Popen``): how a test proves that bad input was
    refused "before any work" without timing it."""
    if not _HOOKED:
        sys.addaudithook(_on_audit)  # cannot be removed: idle while nothing records
        _HOOKED.append(True)
    started: list[str] = []
    _RECORDING.append(started)
    try:
        yield started
    finally:
        _RECORDING.remove(started)


def signals_as_in_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts or terminates: SIGINT, SIGTERM and SIGHUP at
    their default action, as a program started in a terminal has them.

    A test run started in the background of a non-interactive shell (or under nohup, as CI may run it)
    hands its children SIGINT (or SIGHUP) ignored, and Python, a session and joblib all rightly leave
    an ignored signal ignored: without this, the child never sees the Ctrl-C the test sends.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
