"""The store's memory samples, max-pooled into time buckets whose width doubles when a worker's series would pass its bound.

One table's section of :class:`~trainguard.store.Store` (see ``_base.py``).
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.store._base import StoreRows
from trainguard.store._codec import (
    _check_int,
)
from trainguard.store._records import (
    Sample,
)

#: the columns of a :class:`Sample`, in its fields' order (a row is read positionally)
_SELECT_SAMPLES = "SELECT time, worker_id, rss_bytes, uss_bytes, gpu_bytes FROM samples"


class SampleRows(StoreRows):
    """The store's memory samples, max-pooled into time buckets whose width doubles when a worker's series would pass its bound."""

    def add_samples(
        self, run_id: int, worker_id: int, samples: Sequence[tuple[float, int, int | None, int | None]]
    ) -> None:
        """Add memory samples ``(unix time, rss_bytes, uss_bytes, gpu_bytes)`` of one worker.

        Each sample falls in a time bucket; a bucket keeps the highest reading of each kind (and the
        time of the highest RSS). When a worker holds more than ``max_samples_per_worker`` buckets,
        neighbouring buckets are merged pairwise (width doubles), so the stored series stays bounded
        and its peaks survive.
        """
        _check_int(run_id, "run_id")
        _check_int(worker_id, "worker_id")
        rows = []
        for sample in samples:
            try:
                t, rss, uss, gpu = sample
            except (TypeError, ValueError) as err:
                raise ConfigError(
                    f"a sample must be (unix time, rss_bytes, uss_bytes|None, gpu_bytes|None), not {sample!r}"
                ) from err
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                raise ConfigError(f"sample time must be a finite unix time, not {t!r}")
            _check_int(rss, "sample rss_bytes", minimum=0)
            if uss is not None:
                _check_int(uss, "sample uss_bytes", minimum=0)
            if gpu is not None:
                _check_int(gpu, "sample gpu_bytes", minimum=0)
            rows.append((float(t), rss, uss, gpu))
        if not rows:
            return
        with self._write() as conn:
            series = conn.execute(
                "SELECT level FROM sample_series WHERE run_id=? AND worker_id=?", (run_id, worker_id)
            ).fetchone()
            if series is None:
                conn.execute(
                    "INSERT INTO sample_series (run_id, worker_id, level) VALUES (?, ?, 0)",
                    (run_id, worker_id),
                )
                level = 0
            else:
                level = int(series[0])
            width = self._resolution_s * (2**level)
            conn.executemany(
                _UPSERT_SAMPLE,
                [(run_id, worker_id, math.floor(t / width), t, rss, uss, gpu) for t, rss, uss, gpu in rows],
            )
            count = conn.execute(
                "SELECT count(*) FROM samples WHERE run_id=? AND worker_id=?", (run_id, worker_id)
            ).fetchone()[0]
            while count > self._max_samples:
                level += 1
                count = self._merge_buckets(conn, run_id, worker_id)
            conn.execute(
                "UPDATE sample_series SET level=? WHERE run_id=? AND worker_id=?", (level, run_id, worker_id)
            )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (time.time(), run_id))

    @staticmethod
    def _merge_buckets(conn: sqlite3.Connection, run_id: int, worker_id: int) -> int:
        """Halve a worker's series: bucket b -> b // 2, keeping the highest readings. Returns the new count."""
        rows = conn.execute(
            "SELECT bucket, time, rss_bytes, uss_bytes, gpu_bytes FROM samples WHERE run_id=? AND worker_id=?"
            " ORDER BY bucket",
            (run_id, worker_id),
        ).fetchall()
        merged: dict[int, list[Any]] = {}
        for bucket, t, rss, uss, gpu in rows:
            key = bucket // 2
            cur = merged.get(key)
            if cur is None:
                merged[key] = [t, rss, uss, gpu]
                continue
            if rss > cur[1]:
                cur[0], cur[1] = t, rss
            cur[2] = _max_or_none(cur[2], uss)
            cur[3] = _max_or_none(cur[3], gpu)
        conn.execute("DELETE FROM samples WHERE run_id=? AND worker_id=?", (run_id, worker_id))
        conn.executemany(
            "INSERT INTO samples (run_id, worker_id, bucket, time, rss_bytes, uss_bytes, gpu_bytes)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(run_id, worker_id, key, *vals) for key, vals in merged.items()],
        )
        return len(merged)

    def samples(self, run_id: int, worker_id: int | None = None) -> list[Sample]:
        """The stored (downsampled) samples of the run, or of one worker, in time order."""
        rows = self._rows_of_run(
            _SELECT_SAMPLES, run_id, ("worker_id", worker_id), order_by="time, worker_id"
        )
        return [Sample(*r) for r in rows]

    def sample_envelope(self, run_id: int, *, buckets: int = 2000) -> list[Sample]:
        """The run's samples pooled into ``buckets`` equal stretches of its time span, per worker:
        each stretch gives the reading with its highest RSS (at its own time, with the stretch's
        highest USS and GPU bytes) and, when lower, its lowest RSS (at the stretch's first time).

        For drawing a long run: the highest reading of every worker is always kept, and at most
        ``2 * buckets`` samples per worker come back however long the run was.
        """
        _check_int(buckets, "buckets", minimum=1)
        with self._read() as conn:
            t_min, t_max = conn.execute(
                "SELECT min(time), max(time) FROM samples WHERE run_id=?", (run_id,)
            ).fetchone()
            if t_min is None:
                return []
            width = max((t_max - t_min) / buckets, 1e-9)
            key = "worker_id, CAST((time - ?) / ? AS INTEGER)"
            # SQLite takes the bare column `time` from the row holding max(rss_bytes)
            highs = conn.execute(
                f"SELECT {key}, time, max(rss_bytes), max(uss_bytes), max(gpu_bytes)"
                f" FROM samples WHERE run_id=? GROUP BY {key}",
                (t_min, width, run_id, t_min, width),
            ).fetchall()
            lows = conn.execute(
                f"SELECT {key}, min(time), min(rss_bytes) FROM samples WHERE run_id=? GROUP BY {key}",
                (t_min, width, run_id, t_min, width),
            ).fetchall()
        low_by_key = {(w, b): (t, rss) for w, b, t, rss in lows}
        out = []
        for w, b, t, rss, uss, gpu in highs:
            t_low, rss_low = low_by_key.get((w, b), (t, rss))
            if rss_low < rss and t_low != t:
                out.append(Sample(time=t_low, worker_id=w, rss_bytes=rss_low, uss_bytes=None, gpu_bytes=None))
            out.append(Sample(time=t, worker_id=w, rss_bytes=rss, uss_bytes=uss, gpu_bytes=gpu))
        out.sort(key=lambda s: (s.time, s.worker_id))
        return out


# SQLite's two-argument max() is NULL when either side is NULL; coalesce keeps the known reading.
_UPSERT_SAMPLE = (
    "INSERT INTO samples (run_id, worker_id, bucket, time, rss_bytes, uss_bytes, gpu_bytes)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, worker_id, bucket) DO UPDATE SET"
    " time = CASE WHEN excluded.rss_bytes > samples.rss_bytes THEN excluded.time ELSE samples.time END,"
    " rss_bytes = max(samples.rss_bytes, excluded.rss_bytes),"
    " uss_bytes = max(coalesce(samples.uss_bytes, excluded.uss_bytes), coalesce(excluded.uss_bytes, samples.uss_bytes)),"
    " gpu_bytes = max(coalesce(samples.gpu_bytes, excluded.gpu_bytes), coalesce(excluded.gpu_bytes, samples.gpu_bytes))"
)


def _max_or_none(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
