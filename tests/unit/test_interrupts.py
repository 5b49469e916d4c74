"""The supervisor's SIGTERM/SIGHUP/Ctrl-C: raised between passes of the loop, never inside one."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from trainguard.runner.session._interrupts import Interrupts

_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@pytest.fixture(autouse=True)
def default_handlers():
    """Each test starts from the default actions (a library imported by an earlier test in the same
    process may have set its own), and leaves the handlers as it found them."""
    found = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for sig, handler in found.items():
        signal.signal(sig, handler)


def test_a_signal_inside_the_body_raises_when_the_body_ends() -> None:
    interrupts = Interrupts()
    lock = threading.Lock()
    with interrupts.installed():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM received"):
            with interrupts.body():
                lock.acquire()
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, at the next bytecode
                reached = True
                lock.release()
        assert reached and not lock.locked()  # what the body held, it let go of
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the default again after the session


def test_a_signal_outside_the_body_raises_at_once() -> None:
    interrupts = Interrupts()
    with interrupts.installed():
        with pytest.raises(KeyboardInterrupt, match="SIGHUP received"):
            os.kill(os.getpid(), signal.SIGHUP)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a C call: the handler runs by now
            pytest.fail("not interrupted")


def test_one_terminating_signal_is_enough_a_second_does_not_cut_the_shutdown_short() -> None:
    interrupts = Interrupts()
    with interrupts.installed():
        with pytest.raises(KeyboardInterrupt):
            with interrupts.body():
                os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # ignored during the shutdown
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_ctrl_c_waits_for_the_body_too_and_is_a_plain_keyboard_interrupt() -> None:
    interrupts = Interrupts()
    with interrupts.installed():
        with pytest.raises(KeyboardInterrupt) as caught:
            with interrupts.body():
                os.kill(os.getpid(), signal.SIGINT)
                done = True
        assert done and caught.value.args == ()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_the_program_set_is_left_alone() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        with Interrupts().installed():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_nothing_is_installed() -> None:
    found: list[object] = []

    def run() -> None:
        with Interrupts().installed():
            found.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert found == [signal.SIG_DFL]


def test_a_signal_ignored_when_the_session_starts_stays_ignored() -> None:
    # nohup: SIGHUP is inherited ignored, and a run started under it must not stop when the
    # terminal closes
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with Interrupts().installed():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)
        signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


def test_a_stop_requested_from_another_thread_raises_when_the_body_ends() -> None:
    # a pool's caller was interrupted while the session runs in the pool's thread (joblib's abort)
    interrupts = Interrupts()
    with pytest.raises(KeyboardInterrupt) as caught:
        with interrupts.body():
            t = threading.Thread(target=interrupts.request)
            t.start()
            t.join()
            done = True
    assert done and caught.value.args == ()
    with interrupts.body():  # raised once: the next pass runs
        pass
