"""The C allocator's own count of bytes in use: exact evidence of native memory kept.

RSS moves with page faults of temporaries, pools and pages an allocator keeps after ``free``;
the allocator's count of bytes handed out and not yet freed does not. A buffer kept per call
raises it by the same amount every call, a buffer freed again leaves it where it was. Read here:

- glibc: ``mallinfo2()`` (glibc 2.33+), ``uordblks + hblkhd``: bytes in use in every arena plus
  the chunks it serves with ``mmap``. (``mallinfo()`` before 2.33 wraps at 4 GiB: not used.)
- jemalloc (preloaded or linked): ``mallctl("stats.allocated")`` after bumping ``"epoch"``, which
  refreshes jemalloc's cached statistics.
- tcmalloc (gperftools): ``MallocExtension_GetNumericProperty("generic.current_allocated_bytes")``.

Anything else (musl, macOS, mimalloc, an unknown ``.so``) has no reader here:
:class:`AllocatorProbe` then says why (``available`` False, ``reason``), and the leak check rests
on what it has. The figure is this process's own: a child process's allocations are not in it.
Python's small objects come from pymalloc's arenas (``mmap``), not ``malloc``, so they are not in
it either; they are what the census counts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["AllocatorProbe", "detect_allocator", "KNOWN_ALLOCATORS"]

#: substrings of a preloaded or mapped library's name, and the allocator each means
KNOWN_ALLOCATORS = (("jemalloc", "jemalloc"), ("tcmalloc", "tcmalloc"), ("mimalloc", "mimalloc"))


def detect_allocator(environ: dict[str, str] | None = None, maps_path: str = "/proc/self/maps") -> str:
    """``"jemalloc"``, ``"tcmalloc"`` or ``"mimalloc"`` when preloaded (``LD_PRELOAD``) or loaded in
    this process, else ``"glibc"`` on glibc Linux and ``"system"`` elsewhere."""
    env = os.environ if environ is None else environ
    preload = env.get("LD_PRELOAD", "")
    for needle, name in KNOWN_ALLOCATORS:
        if needle in preload:
            return name
    try:
        maps = Path(maps_path).read_text()
    except OSError:
        maps = ""
    for needle, name in KNOWN_ALLOCATORS:
        if f"lib{needle}" in maps:
            return name
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        return "glibc"
    return "system"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _process_symbol(name: str) -> Any:
    """``name`` as the dynamic linker resolves it in this process (a preloaded library first), or
    None when nothing loaded defines it."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None


def _glibc_reader(mallinfo2: Any) -> Callable[[], int]:
    """glibc's bytes in use: every arena's plus the chunks it serves with ``mmap``."""
    mallinfo2.argtypes = []

    def read() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return read


def _jemalloc_reader(mallctl: Any) -> Callable[[], int]:
    """jemalloc's ``stats.allocated``."""
    epoch = ctypes.c_uint64(1)
    value = ctypes.c_size_t(0)
    size = ctypes.c_size_t(ctypes.sizeof(value))

    def read() -> int:
        # stats are cached until the epoch is bumped
        mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(8))
        size.value = ctypes.sizeof(value)
        rc = mallctl(b"stats.allocated", ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0))
        if rc != 0:
            raise OSError(rc, "mallctl('stats.allocated') failed (jemalloc built without stats?)")
        return int(value.value)

    return read


def _tcmalloc_reader(get_property: Any) -> Callable[[], int]:
    """tcmalloc's ``generic.current_allocated_bytes``."""
    value = ctypes.c_size_t(0)

    def read() -> int:
        if not get_property(b"generic.current_allocated_bytes", ctypes.byref(value)):
            raise OSError("tcmalloc does not know generic.current_allocated_bytes")
        return int(value.value)

    return read


#: Each allocator with a reader: the C function its statistic is read through, the type that
#: function returns, and what makes the reader of it.
_READERS: dict[str, tuple[str, Any, Callable[[Any], Callable[[], int]]]] = {
    "glibc": ("mallinfo2", _Mallinfo2, _glibc_reader),
    "jemalloc": ("mallctl", ctypes.c_int, _jemalloc_reader),
    "tcmalloc": ("MallocExtension_GetNumericProperty", ctypes.c_int, _tcmalloc_reader),
}


class AllocatorProbe:
    """Reads the bytes in use of this process's C allocator. Construct once, ``read()`` often.

    Attributes:
        name: the allocator in use (:func:`detect_allocator`).
        available: whether a reader for it was found.
        reason: why not, in words, when not available (empty otherwise).
    """

    def __init__(self, environ: dict[str, str] | None = None, maps_path: str = "/proc/self/maps") -> None:
        self.name = detect_allocator(environ, maps_path)
        self.reason = ""
        self._read = self._bind()
        self.available = self._read is not None

    def _bind(self) -> Callable[[], int] | None:
        """The reader of this allocator's statistic, or None with ``reason`` saying why not."""
        entry = _READERS.get(self.name)
        if entry is None:
            where = "this platform's" if self.name == "system" else f"the {self.name}"
            self.reason = (
                f"allocator evidence unavailable: {where} allocator has no bytes-in-use statistic trainguard "
                "reads (glibc, jemalloc and tcmalloc do)"
            )
            return None
        symbol, restype, make_reader = entry
        func = _process_symbol(symbol)
        if func is None:
            self.reason = (
                f"allocator evidence unavailable: glibc {platform.libc_ver()[1] or '?'} has no mallinfo2() "
                "(glibc 2.33 or later has)"
                if self.name == "glibc"
                else f"allocator evidence unavailable: {self.name}'s statistic cannot be called here"
            )
            return None
        func.restype = restype
        return make_reader(func)

    def read(self) -> int | None:
        """The bytes in use now, or None when no reader is available (or the reader failed once:
        then ``available`` turns False and ``reason`` says why)."""
        if self._read is None:
            return None
        try:
            return int(self._read())
        except OSError as err:
            self._read = None
            self.available = False
            self.reason = f"allocator evidence unavailable: {err}"
            return None
