"""The worker's channel (``runner._channel``): the choice by platform, what Popen is given, and
the socket channel's reader and hang-up watch on real socket pairs (no worker process)."""

from __future__ import annotations

import os
import socket
import sys
import threading

import pytest

from trainguard.exceptions import ConfigError
from trainguard.runner._channel import (
    SocketPair,
    child_ends,
    inherit_options,
    parent_alive_check,
    resolve_channel,
    watch_hangup,
)
from trainguard.runner._protocol import MessageReader, ProtocolError, write_message

pytestmark = pytest.mark.portable  # the hosted macOS and Windows jobs run these too


def test_the_channel_is_the_platforms_unless_asked_and_bad_requests_say_what_to_do():
    assert resolve_channel(None, "linux") == "pipes"
    assert resolve_channel(None, "darwin") == "pipes"
    assert resolve_channel(None, "win32") == "sockets"
    assert resolve_channel("sockets", "linux") == "sockets"
    with pytest.raises(ConfigError, match="channel='pipes' needs POSIX .*use 'sockets'"):
        resolve_channel("pipes", "win32")
    with pytest.raises(ConfigError, match="channel='socket' is not a channel: use 'pipes', 'sockets'"):
        resolve_channel("socket", "linux")


def test_posix_children_get_exactly_the_popen_keywords_they_always_had():
    assert inherit_options((7, 9), "linux") == {"pass_fds": (7, 9), "close_fds": True}
    assert parent_alive_check(os.getppid(), "linux")() is True
    assert parent_alive_check(os.getppid() + 1, "linux")() is False


@pytest.mark.windows
def test_windows_children_get_their_handles_through_a_startupinfo_handle_list():
    pair = SocketPair(1 << 20)
    try:
        options = inherit_options((pair.child_read_fd, pair.child_write_fd))
        assert options["close_fds"] is True and "pass_fds" not in options
        assert options["startupinfo"].lpAttributeList["handle_list"] == [
            pair.child_read_fd,
            pair.child_write_fd,
        ]
        assert parent_alive_check(os.getpid())() is True
    finally:
        pair.close()


@pytest.mark.skipif(sys.platform == "win32", reason="os.dup of a socket handle is POSIX")
def test_messages_cross_the_socket_channel_both_ways_in_frames():
    pair = SocketPair(200_000)
    inbox, outbox = child_ends("sockets", os.dup(pair.child_read_fd), os.dup(pair.child_write_fd))
    try:
        pair.to_worker.send({"op": "exit"})
        assert inbox.recv() == {"op": "exit"}
        write_message(outbox, {"op": "fn_ok", "key": 1})
        big = {"op": "fatal", "message": "x" * 150_000}  # several reads: partial frames wait
        writer = threading.Thread(target=write_message, args=(outbox, big))
        writer.start()
        got = []
        while len(got) < 2:
            got += pair.from_worker.read()
        writer.join()
        assert got == [{"op": "fn_ok", "key": 1}, big]
        assert pair.from_worker.read() == []  # nothing more now: no block
        outbox.sendall((300_000).to_bytes(4, "big"))  # a frame over the cap: refused at its header
        with pytest.raises(ProtocolError, match="over the cap of 200000 bytes"):
            pair.from_worker.read()
    finally:
        inbox.close()
        outbox.close()
        pair.close()


def test_the_reader_says_eof_when_the_workers_end_closes():
    parent, child = socket.socketpair()
    reader = MessageReader(parent, 1 << 20)
    write_message(child, {"op": "fn_ok", "key": 2})
    child.close()
    assert reader.read() == [{"op": "fn_ok", "key": 2}]
    with pytest.raises(EOFError):
        reader.read()
    reader.close()


@pytest.mark.skipif(sys.platform == "win32", reason="os.dup of a socket handle is POSIX")
def test_the_socket_watch_sees_a_hang_up_but_not_a_waiting_message():
    parent, child = socket.socketpair()
    gone = threading.Event()
    parent.sendall(b"\x00\x00\x00\x02{}")  # a message for the worker's main thread: not a hang-up
    watch_hangup("sockets", os.dup(child.fileno()), lambda: True, gone.set)
    assert not gone.wait(1.2)
    assert child.recv(16) == b"\x00\x00\x00\x02{}"  # the watch peeked; the message is all there
    parent.close()
    assert gone.wait(5)
    child.close()


def test_the_guarded_bridge_is_a_unix_socket_on_posix_and_a_named_pipe_on_windows():
    from trainguard.guarded import bridge_family

    assert bridge_family("linux") == "AF_UNIX" and bridge_family("darwin") == "AF_UNIX"
    assert bridge_family("win32") == "AF_PIPE"


def test_a_node_worker_on_the_socket_channel_is_refused_before_anything_starts():
    from trainguard.runner.backends import WorkerSpec
    from trainguard.runner.backends.local import LocalBackend

    spec = WorkerSpec(worker_id=0, slot=0, env={}, bootstrap={}, fn_kind="node", max_message_bytes=1 << 20)
    with pytest.raises(ConfigError, match="a Node worker speaks over pipes only"):
        LocalBackend(channel="sockets").start(spec)
    with pytest.raises(ConfigError, match="channel='tcp' is not a channel"):
        LocalBackend(channel="tcp")
