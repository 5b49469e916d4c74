"""The results store: one SQLite file in WAL mode, written by one supervisor, read by many.

Why these choices:

* WAL with ``synchronous=NORMAL``: a committed transaction survives the writing process being killed
  at any instant (it may be lost only on power failure), and readers never block the writer.
  On a network filesystem (NFS, Lustre, GPFS, BeeGFS, CIFS...), where WAL's shared-memory index is
  unsafe, the rollback journal with ``synchronous=FULL`` instead (``_fs.py``; one writer).
* Every multi-statement write is one ``BEGIN IMMEDIATE`` transaction, so a supervisor killed between
  any two statements leaves either all of a change or none of it. ``finish_trial`` is a single
  conditional UPDATE: it writes a trial's result exactly once and reports whether it did.
* Params, results, errors and configs are JSON text, never pickle: a store can be read by any
  version of any program, and opening one never runs code.
* Memory samples are max-pooled into time buckets whose width doubles whenever a worker's series
  would exceed ``max_samples_per_worker``: long runs stay bounded and peaks are never averaged away.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from trainguard._diskfull import sqlite_full
from trainguard.exceptions import ConfigError, SchemaVersionError, StoreError
from trainguard.store._bytes_in_use import BYTES_IN_USE_TABLE_DDL, BytesInUseRows
from trainguard.store._codec import (
    _check_int,
)
from trainguard.store._events import EventRows
from trainguard.store._file import _EMPTY_STORE_WAIT_S, StoreFile
from trainguard.store._fitted import FittedSizeRows
from trainguard.store._full import store_full_error
from trainguard.store._peaks import PEAK_TABLE_DDL, PeakRows
from trainguard.store._run_view import RunViewRows
from trainguard.store._runs import RunRows
from trainguard.store._samples import SampleRows
from trainguard.store._schema import (
    ADDITIVE_COLUMNS,
    ADDITIVE_TABLES,
    DDL,
    SCHEMA_VERSION,
)
from trainguard.store._stages import StageRows
from trainguard.store._trials import TrialRows
from trainguard.store._workers import WorkerRows

__all__ = ["Store", "DEFAULT_STORE"]

logger = logging.getLogger(__name__)

#: The store file used when none is given (relative to the current folder).
DEFAULT_STORE = "trainguard.db"


def _wait_for_tables(conn: sqlite3.Connection) -> None:
    """A reader that finds a store with no tables yet waits for the creating run's schema to commit
    (it sets WAL mode, which writes the header, a moment before), as ``_check_header`` waits."""
    deadline = time.monotonic() + _EMPTY_STORE_WAIT_S
    query = "SELECT count(*) FROM sqlite_master WHERE type='table'"
    while not conn.execute(query).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.05)


def _remove_empty(path: Path) -> None:
    """Remove a store file (and its -wal/-shm) that this process made and left empty."""
    try:
        if path.stat().st_size:
            return
    except OSError:
        return
    for name in (path.name + "-wal", path.name + "-shm", path.name):
        try:
            path.with_name(name).unlink()
        except OSError:
            pass


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction around the block: committed when it ends, rolled back
    when it raises. BEGIN runs inside the part that rolls back: an interrupt (SIGTERM/SIGHUP raise
    KeyboardInterrupt in the supervisor) landing right after BEGIN would otherwise leave the
    transaction open, and every later write would fail."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    """A write inside :meth:`Store.batch`'s transaction: its statements land together or not at
    all (a caller that catches its error leaves the batch's other writes whole), and nothing is
    committed until the batch ends."""
    conn.execute("SAVEPOINT one_write")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK TO one_write")
            conn.execute("RELEASE one_write")
        raise
    conn.execute("RELEASE one_write")


class Store(
    RunRows,
    TrialRows,
    WorkerRows,
    EventRows,
    SampleRows,
    FittedSizeRows,
    StageRows,
    PeakRows,
    BytesInUseRows,
    RunViewRows,
    StoreFile,
):
    """The results store of runs, trials, attempts, workers, events and memory samples.

    One SQLite file in WAL mode. Only the supervisor writes (``readonly=False``, the default); any
    number of readers (``readonly=True``, e.g. ``trainguard runs``/``show``) may read while it writes.
    A ``Store`` is a context manager; ``close()`` is idempotent. Its methods are thread-safe (the
    supervisor's sampler thread and main thread may share one).

    Args:
        path: the store file, e.g. ``"runs.db"``. Created with its schema when absent (writer only).
        readonly: open an existing store for reading only (SQLite ``mode=ro``); never creates a file.
        max_samples_per_worker: bound on the memory samples kept per worker (>= 16); beyond it the
            series is max-pooled into buckets twice as wide.
        sample_resolution: the initial width of a sample bucket (``"100ms"`` or seconds; default 100 ms).
        busy_timeout: how long to wait for another connection's lock before failing (``"10s"`` or
            seconds; default 10 s).
        sample_resolution_s, busy_timeout_s: the deprecated older names of the two above (warn).
        journal: SQLite's journal for a writer: ``"auto"`` (default: WAL on a local disk, the
            rollback journal on a network filesystem such as NFS, Lustre, GPFS, BeeGFS or CIFS, told
            by ``statfs``), ``"wal"`` (refused on a network filesystem) or ``"delete"``.

    Raises:
        ConfigError: ``path`` is a folder, its folder does not exist, an argument is out of range,
            or ``journal="wal"`` for a store on a network filesystem.
        StoreError: the folder is not writable, the file is not a trainguard store (not SQLite, or
            SQLite with other tables), a read-only open finds no store, or another user could
            have written the store (its file, journal or folder: see ``store/_trust.py``).
        SchemaVersionError: the store was written by another schema version.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        max_samples_per_worker: int = 2000,
        sample_resolution: float | str | None = None,
        busy_timeout: float | str | None = None,
        sample_resolution_s: float | str | None = None,
        busy_timeout_s: float | str | None = None,
        journal: str = "auto",
    ) -> None:
        from trainguard.units import parse_duration, renamed_argument

        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise ConfigError(f"store path must be a file path such as 'runs.db', not {path!r}")
        self._max_samples = _check_int(max_samples_per_worker, "max_samples_per_worker", minimum=16)
        resolution = renamed_argument(
            "sample_resolution", sample_resolution, "sample_resolution_s", sample_resolution_s, 0.1
        )
        self._resolution_s = float(parse_duration(resolution, name="sample_resolution"))
        if self._resolution_s <= 0:
            raise ConfigError(f"sample_resolution={resolution!r} must be > 0, e.g. '100ms'")
        busy = renamed_argument("busy_timeout", busy_timeout, "busy_timeout_s", busy_timeout_s, 10.0)
        self._busy_timeout_s = float(parse_duration(busy, name="busy_timeout"))
        self._path = Path(os.fspath(path)).expanduser()
        self._shown = os.fspath(path)
        self._readonly = bool(readonly)
        self._lock = threading.RLock()
        #: the thread inside :meth:`batch` (its writes join the batch's transaction), or None
        self._batch_thread: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._check_path()
        self.journal = self._choose_journal(journal)
        existed = os.path.lexists(self._path)
        try:
            self._open()
        except BaseException:
            if not existed and not self._readonly:
                _remove_empty(self._path)  # a store that could not be made (a full disk) leaves no file
            raise

    def _open(self) -> None:
        # another user's reader opens an idle store as immutable: no -wal/-shm files of theirs
        self._conn = self._connect(
            immutable=self._readonly and not self._owned_by_me() and self._can_read_immutable()
        )
        try:
            self._init_schema()
        except StoreError:
            self._conn.close()
            self._conn = None
            if not (self._readonly and self._can_read_immutable()):
                raise
            # A reader of a WAL database needs to create its -shm file; in a read-only folder it cannot.
            # When no -wal file holds unmerged commits, nobody can be writing through this folder, so
            # reading the main file as immutable sees every committed transaction.
            logger.debug("store %s: folder is read-only, reading it as immutable", self._shown)
            self._conn = self._connect(immutable=True)
            try:
                self._init_schema()
            except BaseException:
                self._conn.close()
                self._conn = None
                raise
        except BaseException:
            self._conn.close()
            self._conn = None
            raise

    def _connect(self, *, immutable: bool = False) -> sqlite3.Connection:
        try:
            if self._readonly:
                uri = f"file:{quote(str(self._path.absolute()))}?mode=ro" + (
                    "&immutable=1" if immutable else ""
                )
                conn = sqlite3.connect(
                    uri, uri=True, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
                )
            else:
                conn = sqlite3.connect(
                    str(self._path),
                    timeout=self._busy_timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                )
        except sqlite3.OperationalError as err:
            if self._readonly:
                raise StoreError(
                    f"cannot open store {self._shown} for reading: {err}: check the path and its permissions",
                    path=self._shown,
                ) from err
            if self._disk_full(err):
                raise store_full_error(self._shown, self._path) from err
            raise StoreError(self._not_writable_message(), path=self._shown) from err
        try:
            conn.execute("PRAGMA foreign_keys=ON")
            if not self._readonly:
                wanted = self.journal
                mode = conn.execute(f"PRAGMA journal_mode={wanted.upper()}").fetchone()[0]
                if str(mode).lower() != wanted:
                    logger.warning(
                        "store %s: SQLite refused journal mode %s (got %s)", self._shown, wanted, mode
                    )
                # the rollback journal's commits survive a crash only with FULL syncs
                conn.execute("PRAGMA synchronous=NORMAL" if wanted == "wal" else "PRAGMA synchronous=FULL")
        except sqlite3.DatabaseError as err:
            conn.close()
            raise self._map_open_error(err) from err
        return conn

    def _map_open_error(self, err: sqlite3.DatabaseError) -> StoreError:
        text = str(err).lower()
        if "not a database" in text or "malformed" in text or "encrypted" in text:
            return StoreError(self._not_sqlite_message(), path=self._shown)
        if self._disk_full(err):
            return store_full_error(self._shown, self._path)
        if "readonly" in text or "read-only" in text or "unable to open" in text or "disk i/o" in text:
            if self._readonly:
                return StoreError(
                    f"cannot read store {self._shown}: {err}: check its folder's permissions",
                    path=self._shown,
                )
            return StoreError(self._not_writable_message(), path=self._shown)
        return StoreError(f"cannot open store {self._shown}: {err}: pass another --store", path=self._shown)

    def _init_schema(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            if self._readonly:
                _wait_for_tables(conn)
                self._check_version(conn)
                return
            with _immediate(conn):
                if self._check_version(conn, create_if_empty=True):
                    # a store of this version written before an additive table existed
                    for statement in _ddl_statements():
                        if any(
                            f"EXISTS {table} " in statement or f" ON {table} (" in statement
                            for table in ADDITIVE_TABLES
                        ):
                            conn.execute(statement)
                    _add_columns(conn)
                else:
                    for statement in _ddl_statements():
                        conn.execute(statement)
                    from trainguard._version import __version__

                    conn.executemany(
                        "INSERT INTO meta (key, value) VALUES (?, ?)",
                        [
                            ("schema_version", str(SCHEMA_VERSION)),
                            ("created_by", f"trainguard {__version__}"),
                            ("created_at", repr(time.time())),
                        ],
                    )
        except sqlite3.DatabaseError as err:
            raise self._map_open_error(err) from err

    def _check_version(self, conn: sqlite3.Connection, *, create_if_empty: bool = False) -> bool:
        """Return True when the schema is present and current; False when the file is empty (writer)."""
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        names = {n for n in names if not n.startswith("sqlite_")}
        if "meta" not in names:
            if not names and create_if_empty:
                return False
            if not names:
                raise StoreError(
                    f"store {self._shown} is empty: nothing has been run with it yet", path=self._shown
                )
            raise StoreError(
                f"{self._shown} is an SQLite database but not a trainguard store: pass another --store; "
                f"the file was left untouched",
                path=self._shown,
            )
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        try:
            version = int(row[0]) if row else None
        except ValueError:
            version = None
        if version is None:
            raise StoreError(
                f"store {self._shown} has no valid schema_version row: it is damaged or not a trainguard store: "
                f"pass another --store",
                path=self._shown,
            )
        if version > SCHEMA_VERSION:
            from trainguard.store._upgrade import upgrade_advice

            raise SchemaVersionError(
                f"store {self._shown} was written by trainguard schema {version}; this trainguard reads schema "
                f"{SCHEMA_VERSION}: {upgrade_advice()} or use another --store",
                path=self._shown,
                found=version,
                expected=SCHEMA_VERSION,
            )
        if version < SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store {self._shown} was written by trainguard schema {version}; this trainguard reads schema "
                f"{SCHEMA_VERSION} and cannot migrate it: use another --store (the old file is left untouched)",
                path=self._shown,
                found=version,
                expected=SCHEMA_VERSION,
            )
        missing = {"runs", "trials", "attempts", "workers", "events", "samples", "sample_series"} - names
        if missing:
            raise StoreError(
                f"store {self._shown} lacks the tables {', '.join(sorted(missing))}: it is damaged: pass another --store",
                path=self._shown,
            )
        return True

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The store file."""
        return self._path

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def closed(self) -> bool:
        return self._conn is None

    def close(self) -> None:
        """Close the connection. Idempotent; a closed store raises StoreError on use."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else ("read-only" if self._readonly else "open")
        return f"Store({self._shown!r}, {state})"

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(
                f"store {self._shown} is closed: open a new Store({self._shown!r})", path=self._shown
            )
        return self._conn

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The block's writes (from this thread) as one transaction, committed when the block ends,
        by an exception too: each write inside lands whole or not at all (a savepoint), so the
        store then holds just what it would had each write committed alone (a trial's end that
        records ``disk_full`` and raises keeps that record). The supervisor writes a trial's end
        this way: its attempt, result, stats and readings in one commit instead of one each.
        Another thread's writes wait for the block."""
        raised: BaseException | None = None
        try:
            with self._write():
                # a batch inside a batch joins it (a savepoint) and leaves it open when it ends
                outer, self._batch_thread = self._batch_thread, threading.get_ident()
                try:
                    yield
                except BaseException as err:  # committed all the same: what was written stays
                    raised = err
                finally:
                    self._batch_thread = outer
        except BaseException:
            if raised is None:
                raise  # the commit failed (a full disk): the block's own error comes first
        if raised is not None:
            raise raised

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all of the block's statements land, or none of them (inside
        :meth:`batch`, a savepoint of its transaction)."""
        with self._lock:
            conn = self._connection()
            if self._readonly:
                raise StoreError(
                    f"store {self._shown} was opened read-only: open it with readonly=False to write",
                    path=self._shown,
                )
            joins = self._batch_thread == threading.get_ident()
            try:
                with _savepoint(conn) if joins else _immediate(conn):
                    yield conn
            except sqlite3.IntegrityError as err:
                raise StoreError(
                    f"store {self._shown}: {err}: the run id or trial index is not in this store",
                    path=self._shown,
                ) from err
            except sqlite3.Error as err:
                if sqlite_full(err):
                    raise store_full_error(self._shown, self._path) from err
                raise StoreError(
                    f"cannot write store {self._shown}: {err}: check free disk space and permissions",
                    path=self._shown,
                ) from err

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            try:
                yield conn
            except sqlite3.Error as err:
                raise StoreError(f"cannot read store {self._shown}: {err}", path=self._shown) from err

    # -- runs ---------------------------------------------------------------------------------

    # -- trials and attempts --------------------------------------------------------------------

    # -- workers ------------------------------------------------------------------------------

    # -- events -------------------------------------------------------------------------------

    # -- samples ------------------------------------------------------------------------------

    # -- fitted sizes ----------------------------------------------------------------------------

    # -- seeds and stages -------------------------------------------------------------------------


def _add_columns(conn: sqlite3.Connection) -> None:
    """A store of this version written before an additive column existed: add it and fill it."""
    for table, column, kind, fill in ADDITIVE_COLUMNS:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            conn.execute(fill)


def _ddl_statements() -> list[str]:
    lines = [
        line
        for line in (DDL + PEAK_TABLE_DDL + BYTES_IN_USE_TABLE_DDL).splitlines()
        if not line.strip().startswith("--")
    ]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
