"""glibc's heaps as resident, read in a real process (``probes.heaps.HeapResidency``): memory
malloc'd and touched raises them, freed and trimmed lowers them, and memory mapped directly stays
outside them. A subprocess, so that this process's own heap does not get in the way."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's heaps"
)

CHILD = r"""
import ctypes, json, mmap, threading
from trainguard.probes.heaps import HeapResidency
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
h = HeapResidency()
out = {"available": h.available, "before": h.read()}
# 40 MiB in 16 KiB chunks (under the mmap threshold: inside the main heap), each touched
chunks = [libc.malloc(16384) for _ in range(2560)]
for c in chunks:
    ctypes.memset(c, 1, 16384)
out["malloced"] = h.read()
for c in chunks:
    libc.free(c)
libc.malloc_trim(0)
out["trimmed"] = h.read()
m = mmap.mmap(-1, 40 * 1024 * 1024)
m.write(b"z" * (40 * 1024 * 1024))
out["mapped"] = h.read()
# a thread's own arena: its heap is found too
def work():
    ks = [libc.malloc(16384) for _ in range(1280)]
    for k in ks:
        ctypes.memset(k, 2, 16384)
    out["thread_heaps"] = len([r for r in h.regions() if not r.main])
    out["in_thread"] = h.read()
    for k in ks:
        libc.free(k)
t = threading.Thread(target=work); t.start(); t.join()
print(json.dumps(out))
"""

MIB = 1024 * 1024


def test_heaps_residency_follows_malloc_and_trim_not_direct_mappings() -> None:
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["available"] is True
    assert out["malloced"] - out["before"] > 36 * MIB  # 40 MiB malloc'd and touched
    assert out["malloced"] - out["trimmed"] > 36 * MIB  # freed and trimmed: given back
    assert abs(out["mapped"] - out["trimmed"]) < 4 * MIB  # 40 MiB mapped directly: outside the heaps
    assert out["thread_heaps"] >= 1
    assert out["in_thread"] - out["mapped"] > 16 * MIB  # 20 MiB in the thread's arena


def test_unavailable_says_why() -> None:
    from trainguard.probes.heaps import HeapResidency

    h = HeapResidency("jemalloc")
    assert not h.available and h.read() is None
    assert "jemalloc" in h.reason and "glibc's heaps" in h.reason
