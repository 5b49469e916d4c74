"""Steps for the exact-evidence ``no_leak`` tests: a slow step (0.3 s) whose RSS swings by up to
1 MiB through anonymous ``mmap`` (not malloc, nothing a census counts), flat or keeping 64 KiB of
``mmap`` a call in a list the first call makes (no census watches it): growth RSS alone shows."""

import mmap
import random
import time

#: the step's own time: slow enough that a census fits in its share, fast enough for the suite
STEP_S = 0.3
_rng = random.Random(0)
_held: mmap.mmap | None = None
_kept: list[mmap.mmap] | None = None


def _swing() -> None:
    global _held
    size = 4096 * _rng.randint(1, 256)
    m = mmap.mmap(-1, size)
    m.write(b"x" * size)
    if _held is not None:
        _held.close()
    _held = m


def flat() -> None:
    _swing()
    time.sleep(STEP_S)


def mmap_leak() -> None:
    global _kept
    if _kept is None:
        _kept = []
    _swing()
    k = mmap.mmap(-1, 65536)
    k.write(b"y" * 65536)
    _kept.append(k)
    time.sleep(STEP_S)
