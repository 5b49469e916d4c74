"""Trial functions for the runner's bytes-in-use test, loaded as 'bytes_in_use_trials.py:fn'."""

from __future__ import annotations

import ctypes

#: addresses only: nothing the garbage collector or a census sees
_KEPT: list[int] = []
_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]


def keep_native(params):
    """Keep ``mib`` MiB of malloc'd, written memory a trial, never freed."""
    size = int(params["mib"]) * 2**20
    address = _LIBC.malloc(size)
    ctypes.memset(address, 1, size)
    _KEPT.append(address)
    return len(_KEPT)


def native_temporary(params):
    """The same buffer, freed before the trial ends: bytes in use stay flat."""
    size = int(params["mib"]) * 2**20
    address = _LIBC.malloc(size)
    ctypes.memset(address, 1, size)
    _LIBC.free(address)
    return 0
