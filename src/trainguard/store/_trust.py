"""Which stores may be used: never one another user could have written behind your back.

A store's results are reused by a resume as if they were computed, and its runs are shown and
exported as the truth; a store another user can write (theirs to forge, or one in a folder where
they can replace the file or plant its ``-wal`` journal, whose frames SQLite applies on open) is
refused with one line naming who can write it and what to do. What counts as "another user can
write" is :mod:`trainguard._ownership`'s decision, the one the checkpoint folders use.

* writing (a run, a resume): the store file, its ``-wal``/``-shm``/``-journal`` files and its
  folder must be yours (or root's) and writable by no one else; a sticky folder (``/tmp``,
  mode ``1777``) is accepted, since no one else can remove or replace what you put in it;
* reading (``show``, ``report``, ``export``): another user's store may be read (issue 23: a
  colleague's store in a shared folder), but not one that a third user could have written: the
  file and its side files must be writable by their owner alone, and the folder owned by you, root
  or the store's owner, and writable by no one else unless sticky.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainguard._ownership import ROOT, owner_problem, path_problem

__all__ = ["SIDE_FILES", "untrusted_store"]

#: SQLite's files beside a store: what it reads on open as part of the database
SIDE_FILES = ("-wal", "-shm", "-journal")


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def untrusted_store(path: Path, shown: str, *, readonly: bool) -> str | None:
    """None when the store at ``path`` (which may not exist yet) may be used; else the one-line
    refusal."""
    me = os.geteuid()
    real = Path(os.path.realpath(path))
    file_st = _stat(real)
    owners = {me, ROOT}
    if file_st is not None and readonly:
        owners.add(file_st.st_uid)  # reading another user's own store is fine, it is theirs
    fix = "use a store in a folder only you can write (e.g. --store ~/trainguard.db)"
    if path.is_symlink():  # a link another user made could point anywhere, and be changed at any time
        problem = owner_problem(os.lstat(path).st_uid, owners)
        if problem is not None:
            return f"refusing store {shown}: it is a symbolic link that {_words(problem)}: remove it or {fix}"
    folder_st = _stat(real.parent)
    if folder_st is not None:
        problem = path_problem(folder_st, owners, sticky_folder_ok=True)
        if problem is not None:
            return (
                f"refusing store {shown}: its folder {real.parent} {_words(problem)}: another user could "
                f"replace the store or plant its journal; {fix}"
            )
    for suffix in ("", *SIDE_FILES):
        st = file_st if suffix == "" else _stat(real.with_name(real.name + suffix))
        if st is None:
            continue
        problem = path_problem(st, owners)
        if problem is not None:
            what = "the file" if suffix == "" else f"its {suffix[1:]} file {real.name}{suffix}"
            return (
                f"refusing store {shown}: {what} {_words(problem)}: another user could have forged its "
                f"results; {fix}"
            )
    return None


def _words(problem: str) -> str:
    """:mod:`trainguard._ownership`'s words said of a named thing: ``"is owned by ..."``, ``"has
    mode 0777, which lets every user write it"``."""
    if problem.startswith("its mode "):
        mode, _, rest = problem.removeprefix("its mode ").partition(" ")
        return f"has mode {mode}, which {rest}"
    return problem.removeprefix("it ")
