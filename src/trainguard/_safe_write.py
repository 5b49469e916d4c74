"""Writing a file the user named (a report, a leak check's plot) without ever writing through a
path another user planted.

The one writer of every output file the CLI and the API write at a path the user gave:

* a regular file, or nothing yet: written atomically, a temporary file made with ``O_EXCL`` and
  ``O_NOFOLLOW`` in the folder, then renamed over the name. Both are done relative to a descriptor
  of the folder opened once, so a link planted at the name (or the folder swapped) after the check
  is replaced, never followed: the rename replaces a name, it does not write through it;
* a FIFO or a character device (``/dev/stdout``, a terminal, ``/dev/null``, a named pipe): written
  into directly, never replaced by a regular file; refused when another user owns it (a FIFO
  another user made would hand them the output);
* a symbolic link: followed only when you (or root) own it, to what it points to, by the rules
  above (the link stays a link); one owned by another user is refused, and so is a path through a
  folder that is such a link: on a shared machine (``/tmp``) another user can make a name point
  at any file you can write (as root: any file);
* anything else (a folder, a block device, a socket): refused before any work.

Who "another user" is, is :mod:`trainguard._ownership`'s decision (the store's and the checkpoint
folders' too). Every refusal is a :class:`~trainguard.exceptions.ConfigError` of one line saying
what was wrong and what to do.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from trainguard._ownership import ROOT, owner_problem

__all__ = ["OutputTarget", "check_output_file", "write_output_file"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: how many links a path may pass through (the kernel's own limit, MAXSYMLINKS)
_MAX_LINKS = 40


def _config_error(message: str) -> Exception:
    from trainguard.exceptions import ConfigError

    return ConfigError(message)


@dataclass(frozen=True, slots=True)
class OutputTarget:
    """Where an output goes, after its trusted links are followed: ``kind`` is ``"missing"``,
    ``"regular"`` or ``"direct"`` (a FIFO or a character device); ``path`` the file written."""

    kind: str
    path: Path


def _kind(mode: int) -> str:
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


def _untrusted_link(path: Path, shown: str, what: str, flag: str) -> Exception | None:
    """A refusal when ``path`` is a symbolic link that another user owns; else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISLNK(st.st_mode):
        return None
    problem = owner_problem(st.st_uid, (os.geteuid(), ROOT))
    if problem is None:
        return None
    named = "it" if os.fspath(path) == shown else f"{path} on its way"
    return _config_error(
        f"cannot write {what} to {shown}: {named} is a symbolic link that "
        f"{problem.removeprefix('it ')}, and another user's link may point at any file: remove it "
        f"(rm {path}) or pass another {flag}"
    )


def _resolve(path: Path, shown: str, what: str, flag: str) -> Path:
    """``path`` with each symbolic link on it followed, each one checked first (:func:`_untrusted_link`)."""
    pending = list(Path(os.path.abspath(path)).parts)
    current = Path(pending.pop(0))  # the root
    hops = 0
    while pending:
        name = pending.pop(0)
        step = current / name
        refusal = _untrusted_link(step, shown, what, flag)
        if refusal is not None:
            raise refusal
        if not step.is_symlink():
            current = step if name != ".." else current.parent
            continue
        hops += 1
        if hops > _MAX_LINKS:
            raise _config_error(
                f"cannot write {what} to {shown}: too many symbolic links: pass another {flag}"
            )
        target = Path(os.readlink(step))
        pending = [*target.parts, *pending]
        if target.is_absolute():
            current = Path(pending.pop(0))
    return current


def check_output_file(path: str | os.PathLike[str], *, flag: str, what: str) -> OutputTarget:
    """Check, before any work, that ``what`` can be written at ``path`` by this module's rules.

    Raises:
        ConfigError: a link or a FIFO another user owns on the way, a folder, a block device or a
            socket, a folder that does not exist or is not a folder, or one not writable (tried by
            creating and removing a temporary file in it).
    """
    shown = os.fspath(path)
    given = Path(shown).expanduser()
    target = _resolve(given, shown, what, flag)  # every link on the way checked: followed below
    try:
        st = os.stat(given)  # the kernel's own walk: /dev/stdout and /proc/self/fd/N included
        kind = _kind(st.st_mode)
    except FileNotFoundError:
        st, kind = None, "missing"
    if kind == "folder":
        raise _config_error(
            f"cannot write {what} to {shown}: it is a folder: pass a file path such as "
            f"{flag} {shown.rstrip('/')}/{_example(what)}"
        )
    if kind == "direct":
        assert st is not None
        problem = owner_problem(st.st_uid, (os.geteuid(), ROOT))
        if problem is not None:
            raise _config_error(
                f"cannot write {what} to {shown}: it is a FIFO or device that {problem.removeprefix('it ')}: "
                f"pass another {flag}"
            )
        if not os.access(given, os.W_OK):
            raise _config_error(f"cannot write {what} to {shown}: it is not writable: pass another {flag}")
        return OutputTarget("direct", given)
    if kind not in ("missing", "regular"):
        raise _config_error(
            f"cannot write {what} to {shown}: it is {kind}: pass a regular file path, or {flag} - "
            "for standard output"
        )
    _check_folder(target.parent, shown, what, flag)
    return OutputTarget(kind, target)


def _example(what: str) -> str:
    return "leak.png" if "plot" in what else "report.html"


def _check_folder(parent: Path, shown: str, what: str, flag: str) -> None:
    if not parent.exists():
        raise _config_error(
            f"cannot write {what} to {shown}: the folder {parent} does not exist: create it "
            f"(mkdir -p {parent}) or pass another {flag}"
        )
    if not parent.is_dir():
        raise _config_error(
            f"cannot write {what} to {shown}: {parent} is a file, not a folder: pass another {flag}"
        )
    try:
        with _Folder(parent) as folder:
            name, fd = folder.temporary()
            os.close(fd)
            os.unlink(name, dir_fd=folder.fd)
    except OSError as err:
        raise _config_error(
            f"cannot write {what} to {shown}: the folder {parent} is not writable ({err.strerror}): "
            f"pass {flag} in a writable folder, e.g. {flag} ~/{Path(shown).name}"
        ) from None


class _Folder:
    """A folder held open: names made and replaced in it relative to its descriptor."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)

    def __enter__(self) -> _Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def temporary(self) -> tuple[str, int]:
        """A new file of this process's own, never a name someone else made: ``(name, fd)``."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
        for _ in range(100):
            name = f".trainguard-output-{secrets.token_hex(6)}.tmp"
            try:
                return name, os.open(name, flags, 0o600, dir_fd=self.fd)
            except FileExistsError:
                continue
        raise FileExistsError("no free temporary name")


def write_output_file(path: str | os.PathLike[str], data: bytes, *, flag: str, what: str) -> Path:
    """Write ``data`` to ``path`` by this module's rules (checked again at the write); returns the
    file written (``path`` with its trusted links followed).

    Raises:
        ConfigError: as :func:`check_output_file`, or the write failed (its reason in words).
    """
    target = check_output_file(path, flag=flag, what=what)
    try:
        if target.kind == "direct":  # its links were checked: yours or root's, as /dev/stdout's are
            fd = os.open(target.path, os.O_WRONLY | _CLOEXEC)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
        else:
            _replace_atomically(target.path, data)
    except OSError as err:
        raise _config_error(
            f"cannot write {what} to {os.fspath(path)}: {err.strerror}: pass another {flag}"
        ) from None
    return target.path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_atomically(target: Path, data: bytes) -> None:
    with _Folder(target.parent) as folder:
        try:
            old = os.stat(target.name, dir_fd=folder.fd, follow_symlinks=False)
            # keep the mode of a file of yours; one another user left there gets the default
            mine = stat.S_ISREG(old.st_mode) and old.st_uid == os.geteuid()
            mode = stat.S_IMODE(old.st_mode) if mine else 0o644
        except FileNotFoundError:
            mode = 0o644
        name, fd = folder.temporary()
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.replace(name, target.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
        except BaseException:
            try:
                os.unlink(name, dir_fd=folder.fd)
            except OSError:
                pass
            raise
