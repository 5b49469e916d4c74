"""Resident pages of glibc's malloc heaps: the part of RSS the allocator holds.

RSS splits into glibc's heaps (the main arena's ``[heap]``, grown with ``brk``, and each thread
arena's heaps, 64 MiB-aligned mappings) and everything else: pymalloc's arenas, chunks malloc
serves with their own ``mmap``, libraries, a framework's own mappings, memory a step maps itself.
Bytes in use (``allocator.AllocatorProbe``) count the live chunks inside the heaps; pages of the
heaps beyond them are free memory malloc keeps. After ``malloc_trim(0)`` gives free pages back,
the next calls touch them again and the few chunks that outlive a call pin them, so RSS creeps
back toward the untrimmed level while nothing live grows. Measured on the seed's Keras fit with
``trainguard.frameworks.cleanup()`` (70 fits, tensorflow-cpu 2.21): RSS +66 KiB a fit with a
residual spread of 378 KiB; bytes in use +4.4 KiB a fit; RSS outside the heaps +0.5 KiB a fit with
a spread of 11 KiB. Reading which part grew tells allocator retention from memory held outside
malloc (an ``mmap`` kept a call, Python objects) without waiting for RSS's noise to settle.

How: ``/proc/self/maps`` names the main heap; a thread arena's heap is an anonymous read-write
mapping that starts on a 64 MiB boundary, followed by its ``PROT_NONE`` reserve up to the next
boundary (glibc's ``new_heap``), and, where ``/proc/self/mem`` is readable, whose ``heap_info``
header agrees (its sizes within a heap's, its arena inside a heap). ``mincore(2)`` counts each
heap's resident pages. A mapping that is not recognised counts as outside the heaps, which can
only make the split more cautious. Linux, glibc and 64-bit only; elsewhere :class:`HeapResidency`
says why it is unavailable.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["HeapRegion", "HeapResidency", "heap_regions", "HEAP_MAX_BYTES"]

#: glibc's HEAP_MAX_SIZE on 64-bit: 2 * DEFAULT_MMAP_THRESHOLD_MAX = 2 * 4 MiB * sizeof(long)
HEAP_MAX_BYTES = 64 * 1024 * 1024
#: heap_info's first four words: ar_ptr, prev, size, mprotect_size
_HEADER = struct.Struct("=4Q")


@dataclass(frozen=True, slots=True)
class HeapRegion:
    """One of malloc's heaps as mapped: ``[start, end)``; ``main`` for the brk heap."""

    start: int
    end: int
    main: bool


def _parse(line: str) -> tuple[int, int, str, str, str] | None:
    parts = line.split(maxsplit=5)
    if len(parts) < 5 or "-" not in parts[0]:
        return None
    low, high = parts[0].split("-", 1)
    try:
        return int(low, 16), int(high, 16), parts[1], parts[4], parts[5].strip() if len(parts) > 5 else ""
    except ValueError:
        return None


def heap_regions(maps_text: str, page_size: int = 4096) -> list[HeapRegion]:
    """The heaps a ``/proc/PID/maps`` text shows: ``[heap]``, and each anonymous read-write mapping
    on a :data:`HEAP_MAX_BYTES` boundary that ends at the next boundary or where its ``PROT_NONE``
    reserve takes over to that boundary (the shape glibc gives a thread arena's heap). Pure."""
    rows = [r for r in (_parse(line) for line in maps_text.splitlines()) if r is not None]
    out: list[HeapRegion] = []
    for i, (start, end, perms, inode, path) in enumerate(rows):
        if path == "[heap]":
            out.append(HeapRegion(start, end, True))
            continue
        if path or inode != "0" or not perms.startswith("rw") or start % HEAP_MAX_BYTES:
            continue
        boundary = start + HEAP_MAX_BYTES
        if end == boundary:
            out.append(HeapRegion(start, end, False))
            continue
        if end > boundary or i + 1 >= len(rows):
            continue
        n_start, n_end, n_perms, n_inode, n_path = rows[i + 1]
        if (
            n_start == end
            and n_end == boundary
            and n_perms.startswith("---")
            and not n_path
            and n_inode == "0"
        ):
            out.append(HeapRegion(start, end, False))
    return [r for r in out if r.end > r.start and (r.end - r.start) % page_size == 0]


def header_agrees(
    region: HeapRegion, header: tuple[int, int, int, int], starts: set[int], page_size: int
) -> bool:
    """Whether a thread heap's ``heap_info`` fits its mapping: ``size`` within ``mprotect_size``,
    both within :data:`HEAP_MAX_BYTES` and page-sized multiples, and its arena (``ar_ptr``) inside
    a recognised heap. The read-write extent is not compared with the mapping: reading the maps
    allocates, so the heap may have grown (or shrunk) between the two reads. Pure."""
    ar_ptr, _prev, size, mprotect_size = header
    if not 0 < size <= mprotect_size <= HEAP_MAX_BYTES or mprotect_size % page_size:
        return False
    return (ar_ptr - ar_ptr % HEAP_MAX_BYTES) in starts


class HeapResidency:
    """Reads how many bytes of glibc's heaps are resident in this process. Construct once, then
    ``read()``: ``None`` when unavailable (``reason`` says why) or when the heaps changed under
    the reading twice in a row.

    Args:
        allocator: the allocator in use (``allocator.detect_allocator``); only ``"glibc"`` has
            these heaps.
    """

    def __init__(self, allocator: str = "glibc") -> None:
        self.reason = ""
        self.page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._mincore: Any = None
        self._buffer: ctypes.Array[ctypes.c_ubyte] | None = None
        if not sys.platform.startswith("linux"):
            self.reason = "heap residency unavailable: it reads Linux's /proc and mincore(2)"
        elif allocator != "glibc":
            self.reason = f"heap residency unavailable: the {allocator} allocator does not use glibc's heaps"
        elif sys.maxsize <= 2**32:
            self.reason = "heap residency unavailable: glibc's heap layout is read on 64-bit systems only"
        else:
            self._mincore = self._bind()
        self.available = self._mincore is not None

    def _bind(self) -> Any:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            func = libc.mincore
        except (AttributeError, OSError):
            self.reason = "heap residency unavailable: mincore(2) cannot be called here"
            return None
        func.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        func.restype = ctypes.c_int
        return func

    def regions(self) -> list[HeapRegion]:
        """The heaps mapped now, thread heaps checked against their headers where readable."""
        with open("/proc/self/maps") as fh:
            found = heap_regions(fh.read(), self.page_size)
        starts = {r.start for r in found if not r.main}
        try:
            fd = os.open("/proc/self/mem", os.O_RDONLY)
        except OSError:
            return found
        try:
            kept = []
            for region in found:
                if region.main:
                    kept.append(region)
                    continue
                try:
                    raw = os.pread(fd, _HEADER.size, region.start)
                except OSError:  # unmapped since the maps were read
                    continue
                if len(raw) == _HEADER.size and header_agrees(
                    region, _HEADER.unpack(raw), starts, self.page_size
                ):
                    kept.append(region)
            return kept
        finally:
            os.close(fd)

    def _resident(self, region: HeapRegion) -> int:
        pages = (region.end - region.start) // self.page_size
        if self._buffer is None or len(self._buffer) < pages:
            self._buffer = (ctypes.c_ubyte * max(pages, 4096))()
        if self._mincore(region.start, region.end - region.start, self._buffer) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        view = memoryview(self._buffer).cast("B")[:pages]
        # the low bit of each byte is the page's residency; the other bits are reserved (zero)
        return (pages - bytes(view).count(0)) * self.page_size

    def read(self) -> int | None:
        """Resident bytes in glibc's heaps now; None when unavailable or the heaps kept changing
        (a heap unmapped between the maps and ``mincore``)."""
        if self._mincore is None:
            return None
        for _ in range(2):
            try:
                return sum(self._resident(r) for r in self.regions())
            except OSError:
                continue
        return None
