"""SIGTERM, SIGHUP and Ctrl-C in the supervisor: a KeyboardInterrupt, raised where it is safe.

The session shuts down the same way for each (the run marked interrupted, every worker's tree
ended). A handler that raises lands at the next bytecode of whatever the main thread runs: between
a lock's ``acquire()`` and the ``try`` that releases it (``logging.Handler.handle`` has that
shape), or between a transaction's ``BEGIN`` and the block that rolls it back. A lock left held
there stops the watchdog thread, and the shutdown then waits on the pool's lock for ever. So while
the loop's body runs, a signal is only recorded, and :meth:`Interrupts.body` raises it when the
body has ended (within the loop's poll, 0.25 s); anywhere else (the caller's code between results,
the session's start) it raises at once, as before.

Only in the main thread, and only for signals at their default action (a handler the program set
is left alone). Another thread asks for the same stop with :meth:`Interrupts.request` (a pool whose
caller was interrupted while this session runs in the pool's own thread): it is raised where a
deferred signal is, when the loop's body ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Interrupts"]

_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupts:
    """The supervisor's handlers for one session: install with :meth:`installed`, run the loop's
    body inside :meth:`body`."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._deferring = False
        self.pending: int | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is threading.main_thread():
            self._install()
        try:
            yield
        finally:
            for sig, previous in self._previous.items():
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(sig, previous)
            self._previous.clear()

    def _install(self) -> None:
        for sig in (*_TERMINATING, signal.SIGINT):
            try:
                current = signal.getsignal(sig)
                default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
                if current is default:
                    self._previous[sig] = signal.signal(sig, self._handler)
            except (ValueError, OSError):
                continue

    def _handler(self, signum: int, frame: Any) -> None:
        # one interrupt is enough: the shutdown it starts must not be cut short by a second one
        for sig in self._previous:
            if sig != signal.SIGINT:  # a second Ctrl-C still stops a shutdown that hangs
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(sig, signal.SIG_IGN)
        if self._deferring:
            self.pending = signum
            return
        raise _interrupt(signum)

    def request(self) -> None:
        """Stop the session as Ctrl-C does, from any thread: the loop raises ``KeyboardInterrupt``
        when its body next ends (within its poll); a signal already pending is kept."""
        if self.pending is None:
            self.pending = signal.SIGINT

    @contextlib.contextmanager
    def body(self) -> Iterator[None]:
        """Signals that arrive inside are raised when it ends (not when it ends by an exception)."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise _interrupt(signum)


def _interrupt(signum: int) -> KeyboardInterrupt:
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return KeyboardInterrupt(f"{signal.Signals(signum).name} received")
