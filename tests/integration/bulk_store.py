"""A large store built fast: one real run made through :class:`trainguard.store.Store` (the real
schema, meta rows and session row), then its trials, attempts, workers, allocator readings, seeds,
``trial_stats`` events (fragmentation figures, as a torch run records them) and samples written by
bulk SQL, each table filled by one ``INSERT ... SELECT`` over a recursive counter.

Used by the ``show`` memory test and by ``bench/show_memory.py`` (a million trials).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["build_store", "run_measured"]

_COUNTER = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"


def build_store(path: Path, trials: int, *, trials_per_worker: int = 1000, name: str = "big") -> None:
    """Write run ``name`` with ``trials`` finished trials (every 97th failed) to a new store at ``path``."""
    from trainguard.store import Store

    with Store(path) as store:
        run = store.begin_run(name, "bulk.py:train", [{"lr": 0.1}], {"seed": 7})
        store.finish_run(run.run_id, "completed")
        run_id = run.run_id
    t0 = time.time() - trials * 0.01
    workers = max(1, -(-trials // trials_per_worker))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        conn.execute("DELETE FROM trials WHERE run_id=?", (run_id,))
        conn.execute("UPDATE runs SET trial_count=? WHERE run_id=?", (trials, run_id))
        _fill(conn, run_id, trials, trials_per_worker, workers, t0)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _fill(
    conn: sqlite3.Connection, run_id: int, trials: int, per_worker: int, workers: int, t0: float
) -> None:
    last = trials - 1
    status = "CASE WHEN i % 97 = 96 THEN 'failed' ELSE 'ok' END"
    conn.execute(
        f"{_COUNTER} INSERT INTO trials (run_id, idx, params_json, status, value_json, error_json, attempts,"
        " peak_rss_bytes, worker_id, duration_s, finished_at)"
        f" SELECT ?, i, '{{\"lr\": ' || (i % 10) || ', \"batch_size\": ' || (16 << (i % 4)) || '}}', {status},"
        " CASE WHEN i % 97 = 96 THEN NULL ELSE '{\"loss\": ' || (1.0 / (i + 1)) || '}' END,"
        ' CASE WHEN i % 97 = 96 THEN \'{"type": "ValueError", "message": "diverged at step \''
        " || (i % 50) || '\"}' ELSE NULL END,"
        " 1, 200000000 + (i % 1000) * 4096, i / ?, 0.01, ? + i * 0.01 FROM n",
        (last, run_id, per_worker, t0),
    )
    conn.execute(
        f"{_COUNTER} INSERT INTO attempts (run_id, idx, attempt, worker_id, status, error_json,"
        " peak_rss_bytes, duration_s, started_at, finished_at)"
        f" SELECT ?, i, 1, i / ?, CASE WHEN i % 97 = 96 THEN 'exception' ELSE 'ok' END, NULL,"
        " 200000000 + (i % 1000) * 4096, 0.01, ? + i * 0.01 - 0.009, ? + i * 0.01 FROM n",
        (last, run_id, per_worker, t0, t0),
    )
    conn.execute(
        f"{_COUNTER} INSERT INTO trial_seeds (run_id, idx, seed) SELECT ?, i, 1000003 * i % 2147483647 FROM n",
        (last, run_id),
    )
    conn.execute(
        f"{_COUNTER} INSERT INTO bytes_in_use (run_id, idx, attempt, worker_id, allocator, bytes_in_use, time)"
        " SELECT ?, i, 1, i / ?, 'glibc', 50000000 + (i % ?) * 512, ? + i * 0.01 FROM n",
        (last, run_id, per_worker, per_worker, t0),
    )
    conn.execute(
        f"{_COUNTER} INSERT INTO events (run_id, time, kind, message, data_json, worker_id, idx)"
        " SELECT ?, ? + i * 0.01, 'trial_stats', 'trial ' || i || ': cuda:0 reserved 1.0 GiB, allocated 0.8 GiB',"
        ' \'{"fragmentation": [{"framework": "torch", "device": "cuda:0", "reserved_bytes": \''
        ' || (1073741824 + i) || \', "allocated_bytes": 858993459, "inactive_split_bytes": 1048576}]}\','
        " i / ?, i FROM n",
        (last, run_id, t0, per_worker),
    )
    conn.execute(
        f"{_COUNTER} INSERT INTO workers (run_id, worker_id, pid, config_json, started_at, ended_at, reason,"
        " detail_json) SELECT ?, i, 10000 + i, '{}', ? + i * ? * 0.01, ? + (i + 1) * ? * 0.01,"
        " 'recycled_trials', NULL FROM n",
        (workers - 1, run_id, t0, per_worker, t0, per_worker),
    )
    conn.execute(
        f"{_COUNTER} INSERT INTO samples (run_id, worker_id, bucket, time, rss_bytes, uss_bytes, gpu_bytes)"
        " SELECT ?, i / 4, i % 4, ? + (i / 4) * ? * 0.01 + (i % 4), 150000000 + (i % 4) * 1000000, NULL, NULL"
        " FROM n",
        (workers * 4 - 1, run_id, t0, per_worker),
    )
    conn.execute(
        "INSERT INTO events (run_id, time, kind, message, data_json, worker_id, idx)"
        " VALUES (?, ?, 'run_finished', 'run finished', NULL, NULL, NULL)",
        (run_id, t0 + trials * 0.01 + 1),
    )


#: runs the CLI and says its peak RSS at exit: VmHWM is the process's own high-water mark, begun
#: afresh at exec (wait4's ru_maxrss also counts the parent's pages at fork, a large pytest's)
_MEASURED = (
    "import atexit, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as fh:\n"
    "        kib = next(int(line.split()[1]) for line in fh if line.startswith('VmHWM:'))\n"
    "    sys.stderr.write(f'\\nPEAK_RSS_KIB {kib}\\n')\n"
    "atexit.register(peak)\n"
    "from trainguard.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def run_measured(*argv: str) -> tuple[float, str, float]:
    """``trainguard *argv`` in a child process: (its peak RSS in MiB, its stdout, its wall time in s).

    Raises:
        AssertionError: it exited with an error (its stderr in the message).
    """
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *argv],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "160"},
    )
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    kib = int(done.stderr.rsplit("PEAK_RSS_KIB", 1)[1].split()[0])
    return kib / 1024, done.stdout, wall
