"""Checkpoint folders nobody else can plant, swap or redirect.

A staged trial's checkpoints are unpickled when it resumes, so a folder another user could write
into is code that runs as whoever resumes. The folders the runner owns (the store's
``<store>.checkpoints``, the run's ``run-<uuid>``, the trial's ``trial-<index>``) are therefore
created private (mode 0700) by the process's own user, and refused when they exist with another
owner, a mode open to others, or as a symbolic link. Walking them opens each level with
``O_NOFOLLOW`` relative to the level above (``dir_fd``), so a link planted anywhere under the
checkpoint root is never followed, neither to read a checkpoint nor to remove one.

Once a level is verified private, nobody but its owner (and root) can change what is under it, so
the trial's own writes below it may use plain paths.

Content is bound too: :func:`file_digests` hashes the files of a stage at commit, and the
manifest names the run's UUID; :func:`check_manifest` refuses a stage whose hashes or run differ.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import Iterator
from typing import Any

from trainguard._ownership import owner_problem
from trainguard.exceptions import CheckpointError

__all__ = [
    "check_manifest",
    "ensure_private_dirs",
    "file_digests",
    "open_private_dirs",
    "remove_private",
]

logger = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _refuse(path: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"refusing checkpoint folder {path}: {why}; remove it (or put the store in a folder of your own) "
        "and run again"
    )


def _check_private(fd: int, path: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a folder")
    owner = owner_problem(st.st_uid, (os.geteuid(),))  # not even root's: the folders are the user's own
    if owner is not None:
        raise _refuse(path, owner)
    if st.st_mode & 0o077:
        raise _refuse(path, f"its mode is {stat.S_IMODE(st.st_mode):04o}; trainguard makes it 0700")


def _open_level(parent_fd: int | None, name: str, path: str, *, create: bool) -> int | None:
    """Open one level (a name under ``parent_fd``, or an absolute path), never following a link;
    None when it does not exist and ``create`` is False."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent_fd)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as err:
        if os.path.islink(path):
            raise _refuse(path, "it is a symbolic link (trainguard never follows one here)") from None
        raise _refuse(path, f"it cannot be opened ({err.strerror})") from None
    try:
        _check_private(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _split(path: str, levels: int) -> tuple[str, list[str]]:
    """``(anchor, names)``: the last ``levels`` components of ``path`` and the folder above them."""
    names: list[str] = []
    head = os.path.abspath(path)
    for _ in range(levels):
        head, tail = os.path.split(head)
        names.insert(0, tail)
    return head, names


@contextlib.contextmanager
def open_private_dirs(path: str, levels: int, *, create: bool) -> Iterator[int | None]:
    """A descriptor of ``path`` after checking (and with ``create``, making) each of its last
    ``levels`` components a private folder of this user; None when one does not exist.

    Raises:
        CheckpointError: a level is a link, not a folder, owned by another user or open to others.
    """
    anchor, names = _split(path, levels)
    fds: list[int] = []
    try:
        anchor_fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY)
        fds.append(anchor_fd)
        parent: int | None = anchor_fd
        shown = anchor
        for name in names:
            shown = os.path.join(shown, name)
            fd = _open_level(parent, name, shown, create=create)
            if fd is None:
                parent = None
                break
            fds.append(fd)
            parent = fd
        yield parent
    finally:
        for fd in fds:
            os.close(fd)


def ensure_private_dirs(path: str, levels: int) -> str:
    """Make (or check) the last ``levels`` components of ``path`` private folders; returns ``path``."""
    with open_private_dirs(path, levels, create=True):
        return path


def remove_private(path: str, levels: int) -> None:
    """Remove the folder ``path`` (its last ``levels`` components checked private first) without
    following any link in or under it. A level that is missing means nothing to remove; one that is
    unsafe is left alone and logged."""
    try:
        with open_private_dirs(os.path.dirname(os.path.abspath(path)), levels - 1, create=False) as fd:
            if fd is None:
                return
            name = os.path.basename(path)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat.S_ISLNK(st.st_mode):
                os.unlink(name, dir_fd=fd)  # the link itself, never what it points to
                return
            _rmtree_at(fd, name)
    except (CheckpointError, OSError) as err:
        logger.warning("left %s in place: %s", path, err)


def _rmtree_at(parent_fd: int, name: str) -> None:
    """Remove the folder ``name`` under ``parent_fd`` and what is in it, unlinking links (never
    entering them): ``shutil.rmtree(dir_fd=)`` is Python 3.11's; this is the same walk for 3.10."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                _rmtree_at(fd, entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def file_digests(folder: str, skip: str) -> dict[str, list[Any]]:
    """``{relative path: [size, sha256 hex]}`` of the regular files under ``folder`` (but ``skip``)."""
    files: dict[str, list[Any]] = {}
    for base, _dirs, names in os.walk(folder):
        for name in names:
            full = os.path.join(base, name)
            rel = os.path.relpath(full, folder)
            if rel == skip or os.path.islink(full):
                continue
            files[rel] = [os.path.getsize(full), _sha256(full)]
    return files


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_manifest(path: str, manifest: dict[str, Any], run_uuid: str | None) -> str | None:
    """None when the stage folder ``path`` holds what its manifest recorded at commit (each file's
    size and hash, and the run it belongs to); else what differs, in words."""
    if run_uuid is not None and manifest.get("run_uuid") != run_uuid:
        return f"{path} was written by another run (not run {run_uuid[:8]})"
    for rel, recorded in manifest.get("files", {}).items():
        if not isinstance(recorded, list) or len(recorded) != 2:
            return f"{path} has a manifest without content hashes (written by an older trainguard)"
        size, digest = recorded
        full = os.path.join(path, rel)
        try:
            if os.path.islink(full):
                return f"{full} is a symbolic link"
            actual = os.path.getsize(full)
            if actual != size:
                return f"{full} changed size ({actual} bytes, {size} when written)"
            if _sha256(full) != digest:
                return f"{full} changed since it was written (its content hash differs)"
        except OSError:
            return f"{full} was deleted"
    return None
