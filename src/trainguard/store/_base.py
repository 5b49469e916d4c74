"""What every table's section of the store may use of the store itself: its connection
context managers, its path as the user wrote it, and the few methods one section calls on another.

The sections are mixins of :class:`~trainguard.store.Store`, one table each; the connection, the
schema and the locking are the store's own (``_store.py``). This base is last in its method order,
so the store's and each section's own definitions win over these declarations.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

__all__ = ["StoreRows"]


class StoreRows:
    """The store as one table's section sees it; the store sets these and defines the methods."""

    _path: Path
    _shown: str
    _max_samples: int
    _resolution_s: float

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:  # pragma: no cover - Store's
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:  # pragma: no cover - Store's
        raise NotImplementedError

    def _event(self, conn: sqlite3.Connection, *args: Any, **kwargs: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def trial_seeds(self, run_id: int) -> dict[int, int]:  # pragma: no cover - RunRows'
        raise NotImplementedError

    def _require_trial(self, conn: sqlite3.Connection, run_id: int, index: int) -> None:  # pragma: no cover
        raise NotImplementedError
