"""Which filesystem holds the store, and the SQLite journal that is safe there.

SQLite's WAL mode keeps its index in a shared-memory file (``-shm``) that every connection maps;
on a network filesystem (NFS, Lustre, GPFS, BeeGFS, CIFS/SMB, ...) the mapping is not coherent
between hosts and POSIX locks may be emulated, so WAL "does not work over a network filesystem"
(sqlite.org/wal.html) and corrupts quietly. The rollback journal (``journal_mode=DELETE``) needs
only file locks, and with one writer (the supervisor, which a run lock already makes unique) it
is safe there. HPC home and project folders are such filesystems, so the store looks first.

The filesystem is told by ``statfs(2)``'s ``f_type`` (the kernel's magic number for the mounted
filesystem): :func:`statfs_type` is the one edge that asks the kernel; :func:`network_filesystem`
and :func:`choose_journal` are pure.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from trainguard.exceptions import ConfigError

__all__ = ["NETWORK_FILESYSTEMS", "statfs_type", "network_filesystem", "choose_journal", "JOURNALS"]

#: statfs f_type magic numbers of network and cluster filesystems (linux/magic.h and the vendors')
NETWORK_FILESYSTEMS: dict[int, str] = {
    0x6969: "NFS",
    0x0BD00BD0: "Lustre",
    0x47504653: "GPFS (IBM Spectrum Scale)",
    0x19830326: "BeeGFS",
    0xFF534D42: "CIFS/SMB",
    0xFE534D42: "SMB2/SMB3",
    0x517B: "SMB",
    0x00C36400: "CephFS",
    0x5346414F: "AFS",
    0x6B414653: "AFS (kAFS)",
    0x01021997: "9p",
    0xAAD7AAEA: "PanFS",
    0x7461636F: "OCFS2",
    0x01161970: "GFS2",
    0x013111A8: "IBRIX",
    0x65735546: "FUSE (sshfs, GlusterFS, s3fs, ...)",
}

#: what ``Store(journal=...)`` accepts
JOURNALS = ("auto", "wal", "delete")


class _StatFs(ctypes.Structure):
    # struct statfs on 64-bit Linux (glibc): f_type first, then the sizes and counts
    _fields_ = [
        ("f_type", ctypes.c_long),
        ("f_bsize", ctypes.c_long),
        ("f_blocks", ctypes.c_ulong),
        ("f_bfree", ctypes.c_ulong),
        ("f_bavail", ctypes.c_ulong),
        ("f_files", ctypes.c_ulong),
        ("f_ffree", ctypes.c_ulong),
        ("f_fsid", ctypes.c_int * 2),
        ("f_namelen", ctypes.c_long),
        ("f_frsize", ctypes.c_long),
        ("f_flags", ctypes.c_long),
        ("f_spare", ctypes.c_long * 4),
    ]


def statfs_type(path: str) -> int | None:
    """The ``f_type`` of the filesystem that holds ``path`` (the nearest existing folder above a
    file not yet created); None where ``statfs`` cannot be called (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return None
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    buf = _StatFs()
    if libc.statfs(os.fsencode(probe), ctypes.byref(buf)) != 0:
        return None
    return int(buf.f_type) & 0xFFFFFFFF


def network_filesystem(f_type: int | None) -> str | None:
    """The name of the network filesystem with this ``f_type``, or None for a local one."""
    if f_type is None:
        return None
    return NETWORK_FILESYSTEMS.get(f_type & 0xFFFFFFFF)


def choose_journal(journal: str, f_type: int | None, shown: str) -> str:
    """The SQLite journal mode for a store that will be written: ``"wal"`` on a local disk,
    ``"delete"`` (the rollback journal; the supervisor is the one writer) on a network filesystem.

    Raises:
        ConfigError: an unknown ``journal``, or ``journal="wal"`` asked for on a network filesystem.
    """
    if journal not in JOURNALS:
        raise ConfigError(
            f"journal={journal!r} is not a journal mode: use 'auto' (WAL on a local disk, the rollback "
            "journal on a network filesystem), 'wal' or 'delete'"
        )
    network = network_filesystem(f_type)
    if journal == "wal" and network is not None:
        raise ConfigError(
            f"store {shown} is on {network} (statfs type {f_type:#x}), where SQLite's WAL mode is unsafe "
            "(its shared-memory index is not coherent across hosts): use journal='auto' (the rollback "
            "journal with one writer) or put the store on a local disk"
        )
    if journal == "auto":
        return "delete" if network is not None else "wal"
    return journal
