"""Where a report goes: the one writer every report (run, leak check, comparison) uses.

* a regular file, or nothing yet: written atomically (a temporary file in the same folder, then a
  rename), so a failed write never leaves half a report behind;
* a FIFO or a character device (``/dev/stdout``, a terminal, ``/dev/null``, a named pipe): written
  into directly, never replaced by a regular file (as root, a rename would replace ``/dev/null``);
* a symbolic link: what it points to, by the two rules above (the link stays a link);
* ``-``: standard output;
* anything else (a folder, a block device, a socket): refused before any work.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

__all__ = ["STDOUT", "check_output_path", "default_report_name", "shown_output", "write_html"]

#: the output path that means standard output
STDOUT = "-"


def _config_error(message: str) -> Exception:
    from trainguard.exceptions import ConfigError

    return ConfigError(message)


def _kind(target: Path) -> str:
    """``"missing"``, ``"regular"``, ``"direct"`` (FIFO, character device) or what else it is."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if stat.S_ISREG(mode):
        return "regular"
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "direct"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_output_path(path: str | os.PathLike[str], *, flag: str = "-o") -> Path:
    """Check, before any work, that a report can be written at ``path`` (``-``: standard output).

    Raises:
        ConfigError: ``path`` is a folder, a block device or a socket, its folder does not exist or
            is not a folder, or the folder is not writable (tried by creating and removing a
            temporary file in it).
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise _config_error(f"the report path must be a file path such as run.html, or -, not {path!r}")
    shown = os.fspath(path)
    if shown == STDOUT:
        return Path(STDOUT)
    p = Path(shown).expanduser()
    kind = _kind(p)
    if kind == "folder":
        raise _config_error(
            f"cannot write the report to {shown}: it is a folder: pass a file path such as "
            f"{flag} {shown.rstrip('/')}/report.html"
        )
    if kind == "direct":
        if not os.access(p, os.W_OK):
            raise _config_error(
                f"cannot write the report to {shown}: it is not writable: pass another {flag}"
            )
        return p
    if kind not in ("missing", "regular"):
        raise _config_error(
            f"cannot write the report to {shown}: it is {kind}: pass a regular file path, or {flag} - "
            "for standard output"
        )
    parent = Path(os.path.realpath(p)).parent
    if not parent.exists():
        raise _config_error(
            f"cannot write the report to {shown}: the folder {parent} does not exist: create it "
            f"(mkdir -p {parent}) or pass another {flag}"
        )
    if not parent.is_dir():
        raise _config_error(
            f"cannot write the report to {shown}: {parent} is a file, not a folder: pass another {flag}"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".trainguard-report-", suffix=".tmp", dir=parent)
    except OSError as err:
        raise _config_error(
            f"cannot write the report to {shown}: the folder {parent} is not writable ({err.strerror}): "
            f"pass {flag} in a writable folder, e.g. {flag} ~/{p.name}"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return p


def write_html(path: str | os.PathLike[str], html: str, *, flag: str = "-o") -> Path:
    """Write ``html`` to ``path`` by the rules in this module's docstring; returns the path."""
    p = check_output_path(path, flag=flag)
    data = html.encode("utf-8")
    try:
        if os.fspath(p) == STDOUT:
            sys.stdout.flush()
            _write_all(sys.stdout.fileno(), data)
        elif _kind(p) == "direct":
            fd = os.open(p, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
        else:
            _replace_atomically(Path(os.path.realpath(p)), data)
    except OSError as err:
        raise _config_error(
            f"cannot write the report to {os.fspath(path)}: {err.strerror}: pass another {flag}"
        ) from None
    return p


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_atomically(target: Path, data: bytes) -> None:
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=".trainguard-report-", suffix=".tmp", dir=target.parent)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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
