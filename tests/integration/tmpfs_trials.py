"""Trial functions for the tmpfs and file-backed memory tests (loaded by workers as a file ref)."""

from __future__ import annotations

import mmap
import os
import time


def fill_shm(params):
    """Write ``mb`` MiB into ``path`` (in /dev/shm) in 8 MiB pieces, close it, then wait ``hold_s``."""
    chunk = b"\1" * (8 << 20)
    with open(params["path"], "wb") as fh:
        for _ in range(params["mb"] // 8):
            fh.write(chunk)
            time.sleep(0.01)
    time.sleep(params.get("hold_s", 0))
    return os.path.getsize(params["path"])


def mmap_read(params):
    """Map the file ``path`` and read every page of it (clean file-backed pages), then wait a bit."""
    with open(params["path"], "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as view:
        total = 0
        for at in range(0, len(view), mmap.PAGESIZE):
            total += view[at]
        time.sleep(params.get("hold_s", 0))
    return total
