"""How a worker's two channels reach it: OS pipes on POSIX, socket pairs on Windows.

The protocol (:mod:`._protocol`) is the same on both: pickled ``Connection`` frames down, framed
JSON up. What differs is what Windows lacks:

- **pipes** (POSIX, the default there): two ``os.pipe()`` pairs; the child's ends are passed with
  ``subprocess.Popen(pass_fds=...)``; the supervisor's reader is a non-blocking fd; the worker
  watches the down pipe's hang-up with ``select.poll`` and its parent with ``os.getppid()``.
- **sockets** (Windows, where ``pass_fds`` and ``select.poll`` do not exist, and
  ``multiprocessing.connection.wait`` takes pipe handles or *socket* handles, not CRT fds): two
  ``socket.socketpair()`` pairs; the child's ends are made inheritable and handed to it alone
  through ``STARTUPINFO.lpAttributeList["handle_list"]``; ``Connection`` over a socket handle is
  what ``multiprocessing`` itself uses there; the supervisor's reader is a non-blocking socket; the
  worker watches the hang-up with ``select.select`` on sockets (the one kind Windows can select)
  and ``MSG_PEEK``, and its parent through a process handle (Windows never re-parents, so
  ``os.getppid()`` cannot tell that the parent died).

:func:`resolve_channel` picks by ``sys.platform``. ``"sockets"`` also runs on POSIX (socket fds
pass with ``pass_fds`` there), so the Windows-style channel is exercised by the Linux tests
through ``LocalBackend(channel="sockets")``; the handle list and the process-handle watch run only
on Windows.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.runner._protocol import MessageReader, PipePair

__all__ = [
    "CHANNELS",
    "SocketPair",
    "child_ends",
    "inherit_options",
    "make_channel",
    "parent_alive_check",
    "resolve_channel",
    "watch_hangup",
]

#: the channels a worker can be started with
CHANNELS = ("pipes", "sockets")


def resolve_channel(requested: str | None = None, platform: str | None = None) -> str:
    """The channel a worker starts with: ``requested``, or the platform's (sockets on Windows).

    Raises:
        ConfigError: an unknown channel, or ``"pipes"`` on Windows (no ``pass_fds`` there).
    """
    platform = sys.platform if platform is None else platform
    if requested is None:
        return "sockets" if platform == "win32" else "pipes"
    if requested not in CHANNELS:
        raise ConfigError(f"channel={requested!r} is not a channel: use 'pipes', 'sockets' or leave it out")
    if requested == "pipes" and platform == "win32":
        raise ConfigError("channel='pipes' needs POSIX (pass_fds): on Windows leave it out, or use 'sockets'")
    return requested


def inherit_options(handles: tuple[int, int], platform: str | None = None) -> dict[str, Any]:
    """``subprocess.Popen`` keywords that hand the child exactly ``handles`` and nothing else."""
    platform = sys.platform if platform is None else platform
    if platform != "win32":
        return {"pass_fds": handles, "close_fds": True}
    return _handle_list_options(handles)


def _handle_list_options(handles: tuple[int, int]) -> dict[str, Any]:
    if sys.platform != "win32":
        raise OSError("STARTUPINFO handle lists need Windows")
    import subprocess

    for handle in handles:
        os.set_handle_inheritable(handle, True)
    # the documented way to let one child inherit some handles only (close_fds must be true)
    info = subprocess.STARTUPINFO(lpAttributeList={"handle_list": list(handles)})
    return {"close_fds": True, "startupinfo": info}


class SocketPair(PipePair):
    """:class:`~trainguard.runner._protocol.PipePair` over two socket pairs: its own ends and
    child ends; ``close`` is the pipes' (the child's ends first, then the supervisor's)."""

    __slots__ = ("_child_socks",)

    def __init__(self, max_message_bytes: int) -> None:
        down_parent, down_child = socket.socketpair()  # supervisor -> worker
        up_parent, up_child = socket.socketpair()  # worker -> supervisor
        for sock in (down_child, up_child):
            sock.set_inheritable(True)
        self.to_worker = Connection(down_parent.detach(), readable=False, writable=True)
        self.from_worker = MessageReader(up_parent, max_message_bytes)
        self._child_socks: list[socket.socket] = [down_child, up_child]
        self.child_read_fd = down_child.fileno()
        self.child_write_fd = up_child.fileno()

    def close_child_ends(self) -> None:
        """Close the child's sockets here once the child holds them (idempotent)."""
        socks, self._child_socks = self._child_socks, []
        self.child_read_fd = self.child_write_fd = -1
        for sock in socks:
            sock.close()


def make_channel(channel: str, max_message_bytes: int) -> PipePair | SocketPair:
    """The supervisor's ends of a new worker's channel (``"pipes"`` or ``"sockets"``)."""
    return SocketPair(max_message_bytes) if channel == "sockets" else PipePair(max_message_bytes)


def child_ends(channel: str, read_fd: int, write_fd: int) -> tuple[Connection, Any]:
    """Worker side: the inbox connection, and what to :func:`write_message` on (an fd, or a socket)."""
    inbox = Connection(read_fd, readable=True, writable=False)
    if channel != "sockets":
        return inbox, write_fd
    return inbox, socket.socket(fileno=write_fd)


def parent_alive_check(parent_pid: int, platform: str | None = None) -> Callable[[], bool]:
    """A cheap test that the supervisor still runs: ``os.getppid()`` on POSIX (an orphan is
    re-parented), a wait on a process handle opened now on Windows (safe from pid reuse).

    Raises:
        OSError: on Windows, the parent is already gone.
    """
    platform = sys.platform if platform is None else platform
    if platform != "win32":
        return lambda: os.getppid() == parent_pid
    return _process_handle_alive(parent_pid)


def _process_handle_alive(pid: int) -> Callable[[], bool]:
    if sys.platform != "win32":
        raise OSError("a process handle to wait on needs Windows")
    import _winapi

    handle = _winapi.OpenProcess(_winapi.SYNCHRONIZE, False, pid)
    return lambda: _winapi.WaitForSingleObject(handle, 0) != _winapi.WAIT_OBJECT_0


def watch_hangup(
    channel: str, inbox_fd: int, parent_alive: Callable[[], bool], on_gone: Callable[[], None]
) -> None:
    """Call ``on_gone`` from a daemon thread once the supervisor's end of the inbox hangs up or
    ``parent_alive()`` turns false (checked every 0.5 s); the inbox's data is never consumed."""
    wait = _poll_hangup(inbox_fd) if channel != "sockets" else _select_hangup(inbox_fd)

    def watch() -> None:
        while True:
            if wait(0.5) or not parent_alive():
                on_gone()
                return

    threading.Thread(target=watch, name="trainguard-supervisor-watch", daemon=True).start()


def _poll_hangup(fd: int) -> Callable[[float], bool]:
    import select

    poller = select.poll()
    poller.register(fd, 0)  # POLLHUP/POLLERR are always reported; data is not consumed

    def wait(timeout_s: float) -> bool:
        try:
            return bool(poller.poll(int(timeout_s * 1000)))
        except InterruptedError:
            return False

    return wait


def _select_hangup(fd: int) -> Callable[[float], bool]:
    import select

    # a duplicate to select and peek on: the inbox Connection owns (and reads) the original
    original = socket.socket(fileno=fd)
    sock = original.dup()
    original.detach()

    def wait(timeout_s: float) -> bool:
        try:
            readable, _, _ = select.select([sock], [], [], timeout_s)
            if not readable:
                return False
            if sock.recv(1, socket.MSG_PEEK) == b"":
                return True  # end of stream: the supervisor's end is closed
        except InterruptedError:
            return False
        except OSError:
            return True  # reset: the supervisor died
        time.sleep(timeout_s)  # a message waits for the worker's main thread: look again later
        return False

    return wait
