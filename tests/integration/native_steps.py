"""Steps for the allocator-evidence tests: native memory kept through ``ctypes`` ``malloc``
(addresses only, nothing the GC or a census sees), with large temporaries freed around it."""

import ctypes
import os
import subprocess
import sys
import time

import numpy as np

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

KEPT: list[int] = []
SIZE = int(os.environ.get("TG_NATIVE_KIB", "64")) * 1024
_TEMPS = (3 << 20, 700 << 10, 2 << 20)


def _temporaries() -> list[int]:
    temps = [_libc.malloc(n) for n in _TEMPS]
    for t, n in zip(temps, _TEMPS, strict=True):
        _libc.memset(t, 1, n)
    x = np.random.rand(200, 200)
    float((x @ x).sum())
    return temps


def native_leak():
    temps = _temporaries()
    p = _libc.malloc(SIZE)
    _libc.memset(p, 1, SIZE)
    KEPT.append(p)
    for t in temps:
        _libc.free(t)


def native_temporaries():
    for t in _temporaries():
        _libc.free(t)


_CACHE: dict[int, np.ndarray] = {}
_CALLS = [0]


def cache_fills_to_60():
    """A bounded cache: one 1 MB array a call until 60 are kept, then hits only. Bytes in use
    rise by exactly what a leak of 1 MB a call would for 60 calls; 30 ms of "work" makes the
    check read after every call."""
    time.sleep(0.03)
    _CALLS[0] += 1
    key = _CALLS[0] % 60
    if key not in _CACHE:
        _CACHE[key] = np.ones(131072)
    float(_CACHE[key].sum())


def flat_fast():
    np.ones(32768).sum()


CHILD = None


def native_leak_with_child():
    global CHILD
    if CHILD is None:
        CHILD = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    native_leak()


def stop_child():
    if CHILD is not None:
        CHILD.kill()
        CHILD.wait()
