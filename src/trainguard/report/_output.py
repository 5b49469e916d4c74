"""Where a report goes: the one writer every report (run, leak check, comparison) uses.

``-`` is standard output; any other path is written by :mod:`trainguard._safe_write` (the writer of
every output file a user names): a regular file atomically, a FIFO or a character device into
directly, a symbolic link only when you or root own it, and nothing another user planted.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

__all__ = ["STDOUT", "check_output_path", "default_report_name", "shown_output", "write_html"]

#: the output path that means standard output
STDOUT = "-"

_WHAT = "the report"


def _config_error(message: str) -> Exception:
    from trainguard.exceptions import ConfigError

    return ConfigError(message)


def check_output_path(path: str | os.PathLike[str], *, flag: str = "-o") -> Path:
    """Check, before any work, that a report can be written at ``path`` (``-``: standard output).

    Raises:
        ConfigError: ``path`` is a folder, a block device or a socket, a symbolic link or a FIFO
            another user owns, its folder does not exist or is not a folder, or the folder is not
            writable (tried by creating and removing a temporary file in it).
    """
    from trainguard._safe_write import check_output_file

    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise _config_error(f"the report path must be a file path such as run.html, or -, not {path!r}")
    shown = os.fspath(path)
    if shown == STDOUT:
        return Path(STDOUT)
    check_output_file(shown, flag=flag, what=_WHAT)
    return Path(shown).expanduser()


def write_html(path: str | os.PathLike[str], html: str, *, flag: str = "-o") -> Path:
    """Write ``html`` to ``path`` by the rules in this module's docstring; returns the path."""
    from trainguard._safe_write import write_output_file

    p = check_output_path(path, flag=flag)
    data = html.encode("utf-8")
    if os.fspath(p) == STDOUT:
        try:
            sys.stdout.flush()
            _write_all(sys.stdout.fileno(), data)
        except OSError as err:
            raise _config_error(
                f"cannot write the report to {os.fspath(path)}: {err.strerror}: pass another {flag}"
            ) from None
        return p
    write_output_file(os.fspath(path), data, flag=flag, what=_WHAT)
    return p


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def shown_output(path: Path) -> str:
    """How a written report's place is named in a message."""
    return "standard output" if os.fspath(path) == STDOUT else os.path.abspath(path)


def default_report_name(run_name: str) -> str:
    """``<run name>.html`` with anything but letters, digits, ``.``, ``_`` and ``-`` replaced; when
    that changed the name, a short hash of it follows, so two names (``'💥'``, ``'🔥'``) never
    share a file."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_name).strip("._") or "run"
    if safe == run_name and len(safe) <= 80:
        return f"{safe}.html"
    digest = hashlib.sha256(run_name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{safe[:80]}-{digest}.html"
