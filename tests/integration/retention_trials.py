"""Trial functions for the runner's retention test, loaded as 'retention_trials.py:fn'.

Both free what they allocate but for a few small objects kept forever, so their allocator keeps
the freed memory: RSS grows trial over trial while the C allocator's bytes in use stay flat.
"""

from __future__ import annotations

#: the few long-lived objects, each pinning the memory around it
_KEPT: list[object] = []


def pinned_arenas(params):
    """100,000 x (k + 1) small tuples, one in 4096 kept: pymalloc cannot give back an arena with a
    live object in it (its arenas are not malloc's, so bytes in use do not see them either), and
    malloc_trim(0) cannot either."""
    tmp = []
    for i in range(100_000 * (int(params["k"]) + 1)):
        tmp.append((i, i))
        if i % 4096 == 0:
            _KEPT.append((i,))
    del tmp
    return len(_KEPT)


def glibc_fragments(params):
    """2000 x (k + 1) malloc'd 4000-byte buffers, one small buffer in 256 kept above them: glibc's
    heap cannot shrink past a live chunk, but malloc_trim(0) gives the free pages back."""
    tmp = []
    for i in range(2000 * (int(params["k"]) + 1)):
        tmp.append(bytearray(4000))
        if i % 256 == 0:
            _KEPT.append(bytearray(600))
    del tmp
    return len(_KEPT)
