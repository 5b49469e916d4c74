"""The Slurm backend's folders: private to the user, never planted.

A pilot job's folder holds what the node unpickles (submitit's ``<job>_submitted.pkl``: the pilot,
its trial function and the run's token), so a folder another user could write, or read, is code
that runs as this user or a token that opens the driver. Hence:

- the root (``slurm folder=``, default ``trainguard-slurm``) is made 0700 when missing, and refused
  in one line when it is a link, not a folder, another user's, or writable by others
  (:func:`trainguard._ownership.path_problem`, the one owner of that decision);
- each session gets its own folder under it, made with ``mkdir`` that fails when the name exists
  (O_EXCL semantics) and checked after it is made (ours, 0700); submitit's job folders go inside;
- what submitit wrote there is made 0600 (0700 for folders) right after each submission, and the
  pilot makes its own log files 0600 when it starts;
- on the node, :func:`check_private_file` runs before the pickle is unpickled.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from trainguard._ownership import path_problem
from trainguard.exceptions import ConfigError

__all__ = ["check_private_file", "make_session_folder", "make_private", "prepare_root"]


def _refuse_root(folder: Path, why: str) -> ConfigError:
    return ConfigError(
        f"slurm folder={folder} cannot hold the pilot jobs: {why}; remove it, or pass slurm "
        "folder= a folder of your own that every node sees (such as folder=~/tg-slurm)"
    )


def prepare_root(folder: str) -> Path:
    """The root folder, made (0700) when missing, else checked: ours, not a link, and writable
    by no one else.

    Raises:
        ConfigError: in one line, what is wrong and what to do.
    """
    root = Path(folder).expanduser().absolute()
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(root)
    except OSError as err:
        raise _refuse_root(root, f"it cannot be made ({err.strerror or err})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse_root(root, "it is a symbolic link (trainguard never follows one here)")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse_root(root, "it is not a folder")
    why = path_problem(st, (os.geteuid(),))
    if why is not None:
        raise _refuse_root(root, why)
    return root


def make_session_folder(root: Path, name: str) -> Path:
    """A new folder for one session's pilots under ``root``: made here, never found (``mkdir``
    fails when the name exists), then checked ours and 0700."""
    for _ in range(8):
        path = root / f"{name}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        except OSError as err:
            raise _refuse_root(root, f"a folder cannot be made in it ({err.strerror or err})") from None
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise _refuse_root(root, f"{path} changed hands as it was made")
        return path
    raise _refuse_root(root, "no new folder name was free in it")


def make_private(folder: Path) -> None:
    """Every file under ``folder`` 0600 and every folder 0700, without following links."""
    for base, dirs, files in os.walk(folder):
        for name in dirs:
            _chmod(os.path.join(base, name), 0o700)
        for name in files:
            _chmod(os.path.join(base, name), 0o600)


def _chmod(path: str, mode: int) -> None:
    try:
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode) and st.st_uid == os.geteuid():
            os.chmod(path, mode)
    except OSError:
        pass  # gone already (submitit moves its temporary files)


def check_private_file(path: str) -> str | None:
    """None when ``path`` is a regular file of this user, private (no access for others), in a
    folder of this user that only they can enter; else why not, in words."""
    try:
        st = os.lstat(path)
        parent = os.lstat(os.path.dirname(os.path.abspath(path)))
    except OSError as err:
        return f"{path} cannot be read ({err.strerror or err})"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    for what, item in (("file", st), ("folder", parent)):
        if item.st_uid != os.geteuid():
            return f"the {what} of {path} is owned by uid {item.st_uid}, not by you (uid {os.geteuid()})"
        if item.st_mode & 0o077:
            return f"the {what} of {path} has mode {stat.S_IMODE(item.st_mode):04o}, open to others"
    return None
