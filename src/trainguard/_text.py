"""Text a user hands us that must survive UTF-8: SQLite, hashes and JSON all encode it.

A file name or argument with bytes that are not UTF-8 (``$'\\xff'`` in a shell) reaches Python as a
string with lone surrogates (PEP 383); encoding it raises ``UnicodeEncodeError`` deep in a store or
a hash. :func:`require_utf8` refuses it where it enters, in one line that shows the bytes.
"""

from __future__ import annotations

import os

from trainguard.exceptions import ConfigError

__all__ = ["require_utf8", "utf8_problem"]


def utf8_problem(text: str) -> str | None:
    """None when ``text`` encodes as UTF-8, else where it does not (``"byte 0xff at position 3"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start]
        code = ord(bad)
        byte = code - 0xDC00 if 0xDC80 <= code <= 0xDCFF else None
        what = f"byte 0x{byte:02x}" if byte is not None else f"character U+{code:04X}"
        return f"{what} at position {err.start}"
    return None


def require_utf8(text: str, what: str, fix: str) -> str:
    """``text`` itself, or a :class:`ConfigError` naming ``what`` with its raw bytes and ``fix``."""
    problem = utf8_problem(text)
    if problem is None:
        return text
    try:
        raw = os.fsencode(text)  # the bytes the user typed
    except UnicodeEncodeError:  # a surrogate no OS name decodes to
        raw = text.encode("utf-8", "backslashreplace")
    shown = repr(raw)[1:]  # b'...' -> '...'
    raise ConfigError(f"{what} {shown} is not UTF-8 text ({problem}): {fix}")
