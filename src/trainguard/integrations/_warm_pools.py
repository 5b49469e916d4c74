"""Task pools kept warm between joblib ``Parallel`` calls, as loky keeps its workers.

A ``Parallel`` call on the trainguard backend that ends hands its pool here (``keep``), under the
configuration that built it (policy, budget, workers, GPUs, Runner options); the next call with the
same configuration takes it (``take``), its workers already started and their imports done, where
it would otherwise start them again: on a search of millisecond fits, or a test module's many small
calls, the workers' start is most of the wall time. The guard is unchanged: every batch is still
one trial of the pool's Runner, sampled, limited and killed.

One pool is kept at a time. It is closed after :data:`IDLE_S` seconds without a call (loky's own
idle timeout), when a pool of another configuration is kept, and at the interpreter's exit. A pool
that failed or was stopped (``abort_everything``: Ctrl-C, a task's error) is never kept, nor one
that keeps a history (``store=``/``name=``: one run per call, as before).
"""

from __future__ import annotations

import atexit
import pickle
import threading
from typing import Any

__all__ = ["IDLE_S", "pool_key", "take", "keep", "close_kept"]

#: seconds a kept pool waits for the next call before its workers are ended
IDLE_S = 300.0

_lock = threading.Lock()
_kept: list[Any] = []  # [(key, pool, timer)] or empty


def pool_key(*config: Any) -> bytes | None:
    """A key for pools built from ``config``, or None when it cannot be compared (it does not
    pickle): such a pool is not kept."""
    try:
        return pickle.dumps(config)
    except Exception:  # noqa: BLE001 - pickling raises anything: then no reuse
        return None


def take(key: bytes | None) -> Any:
    """The kept pool built from ``key``'s configuration, handed over (no longer kept), else None."""
    if key is None:
        return None
    with _lock:
        if not _kept or _kept[0][0] != key:
            return None
        _, pool, timer = _kept.pop()
    timer.cancel()
    return pool if pool.reusable() else None


def keep(key: bytes | None, pool: Any) -> None:
    """Keep ``pool`` for the next call with the same configuration; a pool that cannot be kept
    (no key, failed or closed) is closed, as is the pool it replaces."""
    if key is None or not pool.reusable():
        pool.close()
        return
    timer = threading.Timer(IDLE_S, _expire, args=(pool,))
    timer.daemon = True
    with _lock:
        old = _kept.pop() if _kept else None
        _kept.append((key, pool, timer))
    timer.start()
    if old is not None:
        old[2].cancel()
        old[1].close()


def _expire(pool: Any) -> None:
    with _lock:
        if not _kept or _kept[0][1] is not pool:
            return
        _kept.pop()
    pool.close()


def close_kept() -> None:
    """End the kept pool's workers now (at exit, or to start afresh)."""
    with _lock:
        old = _kept.pop() if _kept else None
    if old is not None:
        old[2].cancel()
        old[1].close()


atexit.register(close_kept)
