"""A command trial's stderr, read with the same bounds as its stdout: a line is read at most
:data:`STDERR_LINE_CAP_BYTES` at a time (a program that writes gigabytes without a newline never
grows the worker), the failure message keeps the last lines' first 500 characters, and at most the
trial's forward cap is passed on to the terminal; the rest is counted, not held."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

__all__ = ["STDERR_LINE_CAP_BYTES", "StderrPump"]

#: the most of one stderr line held at once (longer lines are read, forwarded and dropped in pieces)
STDERR_LINE_CAP_BYTES = 1 << 16

_TAIL_CHARS = 500


class StderrPump:
    """Reads a program's stderr until EOF; ``tail`` gets its last lines (cut), ``dropped`` counts
    the bytes past ``forward_cap_bytes`` that were not forwarded."""

    def __init__(self, tail: deque[str], forward_cap_bytes: int, lines: Any = None) -> None:
        self.tail = tail
        #: an optional filter of whole lines (``feed(line) -> lines to pass on``, ``flush()``), such
        #: as the command trial's TF.js banner filter
        self.lines = lines
        self.forward_cap = forward_cap_bytes
        self.forwarded = 0
        self.dropped = 0

    def pump(self, stream: Any) -> None:
        in_line = False  # inside a line longer than one read: its pieces are not new lines
        for raw in iter(lambda: stream.readline(STDERR_LINE_CAP_BYTES), b""):
            if in_line or self.lines is None:
                self._take(raw, new_line=not in_line)
            else:
                for line in self.lines.feed(raw):
                    self._take(line, new_line=True)
            in_line = not raw.endswith(b"\n")
        for line in self.lines.flush() if self.lines is not None else ():
            self._take(line, new_line=True)

    def _take(self, raw: bytes, *, new_line: bool) -> None:
        if new_line:
            text = raw[: _TAIL_CHARS * 4].decode("utf-8", "replace").rstrip("\n")
            if text.strip():
                self.tail.append(text[:_TAIL_CHARS])
        self._forward(raw)

    def _forward(self, raw: bytes) -> None:
        room = self.forward_cap - self.forwarded
        part = raw[: max(room, 0)]
        if part:
            try:
                sys.stderr.buffer.write(part)
                sys.stderr.buffer.flush()
            except (OSError, ValueError, AttributeError):
                pass
            self.forwarded += len(part)
        self.dropped += len(raw) - len(part)
