"""Who besides you can write a file or a folder: the one decision behind every refusal of a path
another user could plant, swap or forge (the store and its folder, checkpoint folders, a report's
output path).

Another user can write a path when they own it (an owner can always ``chmod`` it), when its mode
lets "others" write it, or when it lets its group write it and that group holds other users (a
user-private group, the Debian default with ``umask 002``, holds only its user and is no one
else). A folder with the sticky bit (``/tmp``, mode ``1777``) lets others add names but never
remove or replace another user's, so what is already in it stays the owner's.

:func:`write_problem` and :func:`owner_problem` are pure; :func:`group_is_private`,
:func:`user_words` and :func:`path_problem` ask the system (the user and group databases, ``lstat``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection

__all__ = [
    "ROOT",
    "group_is_private",
    "owner_problem",
    "path_problem",
    "user_words",
    "write_problem",
]

#: root can write anything anyway: a path root owns is not another user's
ROOT = 0


def user_words(uid: int) -> str:
    """``"uid 65534 (nobody)"``, or ``"uid 1234"`` for a uid without a name."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def group_is_private(gid: int, owner_uid: int) -> bool:
    """Whether group ``gid`` holds no user but ``owner_uid``: its name is the owner's and it lists
    no other member (a user-private group)."""
    import grp
    import pwd

    try:
        group = grp.getgrgid(gid)
        owner = pwd.getpwuid(owner_uid).pw_name
    except KeyError:
        return False
    return group.gr_name == owner and set(group.gr_mem) <= {owner}


def owner_problem(uid: int, allowed: Collection[int]) -> str | None:
    """None when ``uid`` is one of ``allowed``; else, in words, whose it is."""
    if uid in allowed:
        return None
    return f"it is owned by {user_words(uid)}, not by you (uid {os.geteuid()})"


def write_problem(mode: int, *, group_private: bool, sticky_folder_ok: bool = False) -> str | None:
    """None when a path of this ``mode`` lets no one but its owner write it (a sticky folder counts
    as such with ``sticky_folder_ok``); else, in words, who else can."""
    others = bool(mode & stat.S_IWOTH)
    group = bool(mode & stat.S_IWGRP) and not group_private
    if not (others or group):
        return None
    if sticky_folder_ok and stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
        return None
    who = "every user" if others else "the other users of its group"
    return f"its mode {stat.S_IMODE(mode):04o} lets {who} write it"


def path_problem(
    st: os.stat_result, allowed_owners: Collection[int], *, sticky_folder_ok: bool = False
) -> str | None:
    """:func:`owner_problem` then :func:`write_problem` of what ``os.stat`` returned."""
    problem = owner_problem(st.st_uid, allowed_owners)
    if problem is None:
        private = bool(st.st_mode & stat.S_IWGRP) and group_is_private(st.st_gid, st.st_uid)
        problem = write_problem(st.st_mode, group_private=private, sticky_folder_ok=sticky_folder_ok)
    return problem
