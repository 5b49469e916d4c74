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

import json
import logging
import math
import os
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from trainguard._diskfull import sqlite_full
from trainguard._text import require_utf8, utf8_problem
from trainguard.exceptions import ConfigError, SchemaVersionError, StoreError
from trainguard.store._bytes_in_use import BYTES_IN_USE_TABLE_DDL, BytesInUseRows
from trainguard.store._full import store_full_error
from trainguard.store._lock import RunLock
from trainguard.store._peaks import PEAK_TABLE_DDL, PeakRows
from trainguard.store._records import (
    AttemptRecord,
    EventRecord,
    FittedSize,
    RunInfo,
    RunSummary,
    Sample,
    SessionSettings,
    StageRecord,
    TrialRecord,
    WorkerRecord,
)
from trainguard.store._schema import (
    ADDITIVE_TABLES,
    ATTEMPT_STATUSES,
    DDL,
    SCHEMA_VERSION,
    STAGE_EVENTS,
    TRIAL_STATUSES,
    WORKER_REASONS,
)

__all__ = ["Store", "DEFAULT_STORE"]

logger = logging.getLogger(__name__)

#: The store file used when none is given (relative to the current folder).
DEFAULT_STORE = "trainguard.db"

_SQLITE_HEADER = b"SQLite format 3\x00"
# how long a reader waits for an empty store file to gain its first page (a run creating it)
_EMPTY_STORE_WAIT_S = 2.0


def _read_header(path: Path, shown: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_HEADER))
    except OSError as err:
        raise StoreError(
            f"cannot read store {shown}: {err.strerror}: fix its permissions or pass another --store",
            path=shown,
        ) from err


def _wal_has_commits(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


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


def _json_path_of_bad_value(value: Any, path: str) -> tuple[str, str] | None:
    """Find the first value JSON cannot encode; return (where, type name)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _json_path_of_bad_value(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                return f"{path} key {key!r}", type(key).__name__
            found = _json_path_of_bad_value(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    return path, type(value).__name__


def _dumps(value: Any, what: str) -> str:
    """Encode ``value`` as JSON or raise a one-line ConfigError that names the offending part."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=True)
    except RecursionError:
        raise ConfigError(
            f"{what} is nested too deep to store as JSON (more levels than Python's recursion limit of "
            f"{sys.getrecursionlimit():,}): flatten it, e.g. a list of values instead of lists in lists",
            what=what,
        ) from None
    except (TypeError, ValueError) as err:
        found = _json_path_of_bad_value(value, what)
        where, type_name = found if found else (what, type(value).__name__)
        raise ConfigError(
            f"{where} is a {type_name}, which trainguard cannot store (params and results are stored as "
            f"JSON, never pickle): convert it to a JSON type first, e.g. float(x), int(x), x.tolist(), str(x)",
            what=what,
            type_name=type_name,
        ) from err


def _canonical(value: Any) -> str:
    """JSON text that is equal for equal values whatever the dict key order (for resume checks)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, not {type(value).__name__} ({value!r})", value=repr(value))
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be >= {minimum}", value=value)
    return value


def _check_optional_number(value: Any, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number or None, not {type(value).__name__} ({value!r})")


def _special_file_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (``"a FIFO"``)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _check_run_args(name: Any, fn_ref: Any, params: Any, config: Any) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or "\n" in name:
        raise ConfigError(
            f"run name must be a non-empty one-line string of at most 200 characters, not {name!r}"
        )
    if not isinstance(fn_ref, str):
        raise ConfigError(f"fn_ref must be a string such as 'train.py:train', not {fn_ref!r}")
    require_utf8(name, "run name", "pass a UTF-8 name, e.g. --name sweep1")
    require_utf8(fn_ref, "function", "rename the file or folder to UTF-8 (the store keeps its path)")
    if isinstance(params, (str, bytes, dict)) or not isinstance(params, Sequence):
        raise ConfigError(f"params must be a list with one entry per trial, not {type(params).__name__}")
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a dict, not {type(config).__name__}")


class Store(PeakRows, BytesInUseRows):
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
            SQLite with other tables), or a read-only open finds no store.
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

    # -- opening ------------------------------------------------------------------------------

    def _check_path(self) -> None:
        path, shown = self._path, self._shown
        if path.is_dir():
            raise ConfigError(
                f"store {shown} is a folder: pass a file path such as {shown.rstrip('/')}/runs.db"
            )
        kind = _special_file_kind(path)
        if kind is not None:  # opening a FIFO to read its header would wait for a writer forever
            raise ConfigError(
                f"store {shown} is {kind}, not a file: pass a file path such as runs.db", path=shown
            )
        parent = path.absolute().parent
        if self._readonly:
            if not path.exists():
                raise StoreError(
                    f"no store at {shown}: run something first (trainguard run / Runner(store=...)) "
                    f"or pass the store you used with --store",
                    path=shown,
                )
        else:
            if parent.exists() and not parent.is_dir():
                raise ConfigError(
                    f"cannot create store {shown}: {parent} is a file, not a folder: pass a --store path inside a folder",
                    path=shown,
                )
            if not parent.exists():
                raise ConfigError(
                    f"cannot create store {shown}: the folder {parent} does not exist: create it "
                    f"(mkdir -p {parent}) or pass another --store",
                    path=shown,
                )
            if not path.exists() and not os.access(parent, os.W_OK):
                raise StoreError(self._not_writable_message(), path=shown)
            if path.exists() and not os.access(path, os.W_OK):
                raise StoreError(self._not_writable_message(), path=shown)
        if path.exists():
            self._check_header()

    def _check_header(self) -> None:
        """A file that is there must be SQLite; an empty one only while a run is creating it.

        In WAL mode the schema a new run writes sits in the ``-wal`` file until a checkpoint, so
        the main file stays empty for a while: a reader then is not looking at junk."""
        path, shown = self._path, self._shown
        deadline = time.monotonic() + (_EMPTY_STORE_WAIT_S if self._readonly else 0.0)
        while True:
            header = _read_header(path, shown)
            if header and header != _SQLITE_HEADER:
                raise StoreError(self._not_sqlite_message(), path=shown)
            if header or not self._readonly or _wal_has_commits(path):
                return
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"store {shown} is an empty file, not a trainguard store: pass the store you ran with (--store)",
                    path=shown,
                )
            time.sleep(0.05)

    def _choose_journal(self, journal: str) -> str:
        """WAL on a local disk, the rollback journal on a network filesystem (see ``_fs``)."""
        from trainguard.store import _fs

        f_type = _fs.statfs_type(str(self._path))
        mode = _fs.choose_journal(journal, f_type, self._shown)
        network = _fs.network_filesystem(f_type)
        if network is not None and not self._readonly:
            logger.info(
                "store %s is on %s: SQLite's rollback journal with one writer (WAL is unsafe there)",
                self._shown,
                network,
            )
        return mode

    def _disk_full(self, err: sqlite3.Error) -> bool:
        """SQLite's "disk is full", or an open that failed (it cannot make its -wal/-shm files, and
        says "unable to open" or "disk I/O error") on a disk with (nearly) nothing free."""
        from trainguard._diskfull import LOW_FREE_BYTES, free_bytes

        if self._readonly:
            return False
        free = free_bytes(self._path)
        return sqlite_full(err) or (free is not None and free < LOW_FREE_BYTES)

    def _not_writable_message(self) -> str:
        parent = self._path.absolute().parent
        return (
            f"cannot write store {self._shown}: the folder {parent} (or the file) is not writable: pass a "
            f"--store in a writable folder, e.g. --store ~/trainguard.db"
        )

    def _not_sqlite_message(self) -> str:
        return (
            f"{self._shown} is not a trainguard store (not an SQLite database): pass another --store; "
            f"the file was left untouched"
        )

    def _can_read_immutable(self) -> bool:
        wal = self._path.with_name(self._path.name + "-wal")
        try:
            wal_bytes = wal.stat().st_size
        except FileNotFoundError:
            wal_bytes = 0
        except OSError:
            return False
        if wal_bytes:
            return False
        # a reader that is not the store's owner reads it as it is, creating no -wal/-shm files:
        # in a shared (sticky) folder the owner could not delete those, and its next run would fail;
        # on a full disk a reader cannot grow its -shm file, and no writer can commit anything
        from trainguard._diskfull import LOW_FREE_BYTES, free_bytes

        free = free_bytes(self._path)
        return (
            not os.access(self._path.absolute().parent, os.W_OK)
            or not self._owned_by_me()
            or (free is not None and free < LOW_FREE_BYTES)
        )

    def _owned_by_me(self) -> bool:
        try:
            return self._path.stat().st_uid == os.geteuid()
        except OSError:
            return True

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
                self._check_version(conn)
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._check_version(conn, create_if_empty=True):
                    # a store of this version written before an additive table existed
                    for statement in _ddl_statements():
                        if any(
                            f"EXISTS {table} " in statement or f" ON {table} (" in statement
                            for table in ADDITIVE_TABLES
                        ):
                            conn.execute(statement)
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
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
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
            raise SchemaVersionError(
                f"store {self._shown} was written by trainguard schema {version}; this trainguard reads schema "
                f"{SCHEMA_VERSION}: upgrade trainguard (pip install -U trainguard) or use another --store",
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
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all of the block's statements land, or none of them."""
        with self._lock:
            conn = self._connection()
            if self._readonly:
                raise StoreError(
                    f"store {self._shown} was opened read-only: open it with readonly=False to write",
                    path=self._shown,
                )
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
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

    def begin_run(self, name: str, fn_ref: str, params: Sequence[Any], config: dict[str, Any]) -> RunInfo:
        """Create a run with one pending trial per params entry, or resume the run of that name.

        Args:
            name: the run's unique name.
            fn_ref: what is run, e.g. ``"train.py:train"`` (kept for display).
            params: one JSON-serializable entry per trial; the trial index is the position.
            config: the runner's settings (policy, workers...), JSON-serializable.

        Returns:
            The run. ``resumed`` is True when a run of that name with the same params existed;
            workers and attempts its earlier session left open are then marked ``interrupted``.

        Raises:
            ConfigError: a bad argument, a value that is not JSON-serializable, or a run of that name
                with different params (pass another name).
        """
        _check_run_args(name, fn_ref, params, config)
        params = list(params)
        params_json = _dumps(params, "params")
        trial_rows = [_dumps(p, f"params[{i}]") for i, p in enumerate(params)]
        config_json = _dumps(config, "config")
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                "SELECT run_id, params_json, fn_ref FROM runs WHERE name=?", (name,)
            ).fetchone()
            resumed = row is not None
            if row is None:
                run_id = self._create_run(conn, name, fn_ref, params_json, config_json, trial_rows, now)
            else:
                run_id = int(row[0])
                self._check_same_params(name, row[1], params_json)
                self._resume_run(conn, run_id, name, fn_ref, row[2], len(params), config_json, now)
        info = self.get_run_by_id(run_id)
        assert info is not None
        return _replace_run(info, resumed=resumed)

    def _create_run(
        self,
        conn: sqlite3.Connection,
        name: str,
        fn_ref: str,
        params_json: str,
        config_json: str,
        trial_rows: list[str],
        now: float,
    ) -> int:
        cur = conn.execute(
            "INSERT INTO runs (name, fn_ref, params_json, config_json, status, trial_count, sessions,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, 'running', ?, 1, ?, ?)",
            (name, fn_ref, params_json, config_json, len(trial_rows), now, now),
        )
        run_id = int(cur.lastrowid or 0)  # set by the INSERT just run
        _record_session(conn, run_id, 1, config_json, now)
        conn.executemany(
            "INSERT INTO trials (run_id, idx, params_json) VALUES (?, ?, ?)",
            [(run_id, i, text) for i, text in enumerate(trial_rows)],
        )
        self._event(
            conn,
            run_id,
            "run_started",
            f"run {name} started with {len(trial_rows)} trials",
            {"fn_ref": fn_ref, "trials": len(trial_rows)},
            None,
            None,
            now,
        )
        return run_id

    def _check_same_params(self, name: str, old_params_json: str, params_json: str) -> None:
        old_params, new_params = json.loads(old_params_json), json.loads(params_json)
        if _canonical(old_params) != _canonical(new_params):
            raise ConfigError(
                f"a run named {name!r} already exists in {self._shown} with different params "
                f"({len(old_params)} trials stored, {len(new_params)} given): pass another name (--name) "
                f"to start a new run, or the same params to resume it",
                name=name,
            )

    def _resume_run(
        self,
        conn: sqlite3.Connection,
        run_id: int,
        name: str,
        fn_ref: str,
        old_fn_ref: str,
        trial_count: int,
        config_json: str,
        now: float,
    ) -> None:
        """Mark what the earlier session left open interrupted and the run running again."""
        old = conn.execute(
            "SELECT config_json, sessions, created_at FROM runs WHERE run_id=?", (run_id,)
        ).fetchone()
        interrupted_workers = conn.execute(
            "UPDATE workers SET ended_at=?, reason='interrupted' WHERE run_id=? AND ended_at IS NULL",
            (now, run_id),
        ).rowcount
        interrupted_attempts = conn.execute(
            "UPDATE attempts SET finished_at=?, status='interrupted' WHERE run_id=? AND finished_at IS NULL",
            (now, run_id),
        ).rowcount
        pending = conn.execute(
            "SELECT count(*) FROM trials WHERE run_id=? AND status='pending'", (run_id,)
        ).fetchone()[0]
        conn.execute(
            "UPDATE runs SET status='running', sessions=sessions+1, updated_at=?, finished_at=NULL,"
            " config_json=? WHERE run_id=?",
            (now, config_json, run_id),
        )
        data: dict[str, Any] = {
            "pending": pending,
            "interrupted_workers": interrupted_workers,
            "interrupted_attempts": interrupted_attempts,
        }
        changed = _session_change(conn, run_id, old, config_json, now)
        said = ""
        if changed:
            data["settings_changed"] = changed
            said = ", with other settings: " + settings_change_words(changed) + " (each trial keeps its own)"
            logger.warning("run %s resumed with other settings: %s", name, settings_change_words(changed))
        if old_fn_ref != fn_ref:
            data["old_fn_ref"] = old_fn_ref
            logger.warning("run %s was started with %s and is resumed with %s", name, old_fn_ref, fn_ref)
        self._event(
            conn,
            run_id,
            "run_resumed",
            f"run {name} resumed: {pending} of {trial_count} trials left{said}",
            data,
            None,
            None,
            now,
        )

    def finish_run(self, run_id: int, status: str, *, reason: str | None = None) -> None:
        """Record the end of a run (``status`` such as ``"completed"``, ``"failed"``, ``"interrupted"``).

        ``reason`` (one line, e.g. why the trial function could not be loaded) is kept in the
        ``run_finished`` event that ``trainguard show`` lists.
        """
        _check_int(run_id, "run_id")
        if not isinstance(status, str) or not status or not status.replace("_", "").isalnum():
            raise ConfigError(f"run status must be a word such as 'completed' or 'failed', not {status!r}")
        if reason is not None and not isinstance(reason, str):
            raise ConfigError(f"run end reason must be a string, not {type(reason).__name__}")
        now = time.time()
        data: dict[str, Any] = {"status": status}
        message = f"run {status}"
        if reason:
            data["reason"] = reason
            message = f"run {status}: {reason}"
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status=?, finished_at=?, updated_at=? WHERE run_id=?",
                (status, now, now, run_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"no run with id {run_id} in store {self._shown}", path=self._shown)
            self._event(conn, run_id, "run_finished", message, data, None, None, now)

    def lock_run(self, name: str, *, reserve_bytes: int = 0) -> RunLock:
        """Take the lock of run ``name`` of this store for one supervisor (release it when done).
        ``reserve_bytes`` are kept allocated in the lock file until ``free_reserve()``: room to
        record the run's end when the disk fills up.

        Raises:
            RunLockedError: a live supervisor holds it; the message names its pid, host and start.
            DiskFullError: the store's disk has less free than the reserve.
        """
        return RunLock(self._path.absolute(), name, self._shown, reserve_bytes=reserve_bytes).acquire()

    def rename_run(self, run_id: int, new_name: str) -> None:
        """Give a stored run another name (``Runner(fresh=True)`` keeps a replaced run this way).

        Raises:
            ConfigError: a bad name, or one another run already has.
            StoreError: no run with that id.
        """
        _check_int(run_id, "run_id")
        if not isinstance(new_name, str) or not new_name.strip() or len(new_name) > 200 or "\n" in new_name:
            raise ConfigError(
                f"run name must be a non-empty one-line string of at most 200 characters, not {new_name!r}"
            )
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE name=?", (new_name,)).fetchone() is not None:
                raise ConfigError(
                    f"a run named {new_name!r} already exists in {self._shown}: pick another name"
                )
            # no event and no updated_at: a renamed run's times stay those of its own work
            cur = conn.execute("UPDATE runs SET name=? WHERE run_id=?", (new_name, run_id))
            if cur.rowcount == 0:
                raise StoreError(f"no run with id {run_id} in store {self._shown}", path=self._shown)

    def get_run(self, name: str) -> RunInfo | None:
        """The run called ``name``, or None."""
        if utf8_problem(name) is not None:  # no stored name has bytes that are not UTF-8
            return None
        with self._read() as conn:
            row = conn.execute(_RUN_SELECT + " WHERE name=?", (name,)).fetchone()
        return _run_info(row) if row else None

    def get_run_by_id(self, run_id: int) -> RunInfo | None:
        """The run with this id, or None."""
        with self._read() as conn:
            row = conn.execute(_RUN_SELECT + " WHERE run_id=?", (run_id,)).fetchone()
        return _run_info(row) if row else None

    def list_runs(self) -> list[RunSummary]:
        """Every run, oldest first, with trial counts, duration and peak RSS."""
        return self._summaries(None)

    def summary(self, run_id: int) -> RunSummary | None:
        """One run's :class:`RunSummary`, or None."""
        found = self._summaries(run_id)
        return found[0] if found else None

    def _summaries(self, run_id: int | None) -> list[RunSummary]:
        where, args = ("WHERE r.run_id=?", (run_id,)) if run_id is not None else ("", ())
        with self._read() as conn:
            rows = conn.execute(
                "SELECT r.run_id, r.name, r.fn_ref, r.status, r.trial_count, r.created_at, r.updated_at,"
                " r.finished_at, r.sessions,"
                " coalesce(sum(t.status='ok'), 0), coalesce(sum(t.status='failed'), 0),"
                " coalesce(sum(t.status='pending'), 0), max(t.peak_rss_bytes)"
                f" FROM runs r LEFT JOIN trials t ON t.run_id = r.run_id {where}"
                " GROUP BY r.run_id ORDER BY r.created_at, r.run_id",
                args,
            ).fetchall()
            sample_peaks = dict(
                conn.execute("SELECT run_id, max(rss_bytes) FROM samples GROUP BY run_id").fetchall()
            )
            attempt_peaks = dict(
                conn.execute("SELECT run_id, max(peak_rss_bytes) FROM attempts GROUP BY run_id").fetchall()
            )
            workers = dict(conn.execute("SELECT run_id, count(*) FROM workers GROUP BY run_id").fetchall())
            work = _work_times(conn, run_id)
        out = []
        for (
            rid,
            name,
            fn_ref,
            status,
            total,
            created,
            updated,
            finished,
            sessions,
            ok,
            failed,
            pending,
            trial_peak,
        ) in rows:
            peaks = [p for p in (trial_peak, sample_peaks.get(rid), attempt_peaks.get(rid)) if p is not None]
            out.append(
                RunSummary(
                    run_id=rid,
                    name=name,
                    fn_ref=fn_ref,
                    status=status,
                    trials_total=total,
                    trials_ok=int(ok),
                    trials_failed=int(failed),
                    trials_pending=int(pending),
                    created_at=created,
                    updated_at=updated,
                    finished_at=finished,
                    duration_s=_work_s(work.get(rid), created, finished if finished is not None else updated),
                    peak_rss_bytes=max(peaks) if peaks else None,
                    workers_started=int(workers.get(rid, 0)),
                    sessions=sessions,
                )
            )
        return out

    # -- trials and attempts --------------------------------------------------------------------

    def unfinished_trials(self, run_id: int) -> list[tuple[int, Any]]:
        """``(index, params)`` of the trials not yet finished, in index order."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT idx, params_json FROM trials WHERE run_id=? AND status='pending' ORDER BY idx",
                (run_id,),
            ).fetchall()
        return [(int(i), json.loads(p)) for i, p in rows]

    def start_attempt(self, run_id: int, index: int, attempt: int, worker_id: int) -> None:
        """Record that ``attempt`` (1, 2, ...) of trial ``index`` started in worker ``worker_id``."""
        _check_int(run_id, "run_id")
        _check_int(index, "index", minimum=0)
        _check_int(attempt, "attempt", minimum=1)
        _check_int(worker_id, "worker_id")
        now = time.time()
        with self._write() as conn:
            self._require_trial(conn, run_id, index)
            conn.execute(
                "INSERT INTO attempts (run_id, idx, attempt, worker_id, started_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, index, attempt, worker_id, now),
            )
            conn.execute(
                "UPDATE trials SET attempts=max(attempts, ?) WHERE run_id=? AND idx=? AND status='pending'",
                (attempt, run_id, index),
            )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def finish_attempt(
        self,
        run_id: int,
        index: int,
        attempt: int,
        *,
        status: str,
        error: dict[str, Any] | None,
        peak_rss_bytes: int | None,
        duration_s: float | None,
        worker_id: int | None = None,
    ) -> bool:
        """Record how an attempt ended. Returns False (writing nothing) when it was already recorded.

        An attempt never started with :meth:`start_attempt` is recorded anyway when ``worker_id``
        says which worker ran it.

        Raises:
            ConfigError: ``status`` is not one of :data:`ATTEMPT_STATUSES`, ``error`` is not JSON, or
                the attempt was never started and no ``worker_id`` is given.
        """
        _check_int(run_id, "run_id")
        _check_int(index, "index", minimum=0)
        _check_int(attempt, "attempt", minimum=1)
        if status not in ATTEMPT_STATUSES:
            raise ConfigError(
                f"attempt status {status!r} is not one of {', '.join(sorted(ATTEMPT_STATUSES))}"
            )
        if peak_rss_bytes is not None:
            _check_int(peak_rss_bytes, "peak_rss_bytes", minimum=0)
        _check_optional_number(duration_s, "duration_s")
        if worker_id is not None:
            _check_int(worker_id, "worker_id")
        error_json = _dumps(error, "error") if error is not None else None
        now = time.time()
        with self._write() as conn:
            self._require_trial(conn, run_id, index)
            cur = conn.execute(
                "UPDATE attempts SET status=?, error_json=?, peak_rss_bytes=?, duration_s=?, finished_at=?"
                " WHERE attempt_pk=(SELECT max(attempt_pk) FROM attempts WHERE run_id=? AND idx=? AND attempt=?"
                " AND finished_at IS NULL)",
                (status, error_json, peak_rss_bytes, duration_s, now, run_id, index, attempt),
            )
            if cur.rowcount == 0:
                seen = conn.execute(
                    "SELECT 1 FROM attempts WHERE run_id=? AND idx=? AND attempt=?", (run_id, index, attempt)
                ).fetchone()
                if seen:
                    return False
                if worker_id is None:
                    raise ConfigError(
                        f"attempt {attempt} of trial {index} in run {run_id} was never started: call "
                        "start_attempt() first, or pass worker_id= to record an attempt that was not"
                    )
                conn.execute(
                    "INSERT INTO attempts (run_id, idx, attempt, worker_id, status, error_json, peak_rss_bytes,"
                    " duration_s, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        index,
                        attempt,
                        worker_id,
                        status,
                        error_json,
                        peak_rss_bytes,
                        duration_s,
                        now - (duration_s or 0.0),
                        now,
                    ),
                )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))
        return True

    def finish_trial(
        self,
        run_id: int,
        index: int,
        *,
        status: str,
        value: Any,
        error: dict[str, Any] | None,
        attempts: int,
        peak_rss_bytes: int | None,
        worker_id: int | None,
        duration_s: float | None,
    ) -> bool:
        """Record a trial's final result, exactly once.

        One conditional UPDATE in one transaction: a supervisor killed at any instant leaves the trial
        either pending (it is rerun on resume) or finished with all its fields, never half-written.

        Returns:
            True if this call finished the trial; False (writing nothing) if it was already finished.

        Raises:
            ConfigError: ``status`` is not "ok"/"failed", or ``value``/``error`` is not JSON-serializable.
            StoreError: there is no such trial.
        """
        _check_int(run_id, "run_id")
        _check_int(index, "index", minimum=0)
        if status not in TRIAL_STATUSES:
            raise ConfigError(f"trial status must be 'ok' or 'failed', not {status!r}")
        _check_int(attempts, "attempts", minimum=0)
        if peak_rss_bytes is not None:
            _check_int(peak_rss_bytes, "peak_rss_bytes", minimum=0)
        if worker_id is not None:
            _check_int(worker_id, "worker_id")
        _check_optional_number(duration_s, "duration_s")
        value_json = _dumps(value, f"the result of trial {index}")
        error_json = _dumps(error, "error") if error is not None else None
        now = time.time()
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE trials SET status=?, value_json=?, error_json=?, attempts=?, peak_rss_bytes=?,"
                " worker_id=?, duration_s=?, finished_at=? WHERE run_id=? AND idx=? AND status='pending'",
                (
                    status,
                    value_json,
                    error_json,
                    attempts,
                    peak_rss_bytes,
                    worker_id,
                    duration_s,
                    now,
                    run_id,
                    index,
                ),
            )
            if cur.rowcount == 0:
                self._require_trial(conn, run_id, index)
                return False
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))
        return True

    def trials(self, run_id: int) -> list[TrialRecord]:
        """Every trial of the run, in index order."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT run_id, idx, params_json, status, value_json, error_json, attempts, peak_rss_bytes,"
                " worker_id, duration_s, finished_at FROM trials WHERE run_id=? ORDER BY idx",
                (run_id,),
            ).fetchall()
        seeds = self.trial_seeds(run_id)
        return [
            TrialRecord(
                run_id=r[0],
                index=r[1],
                params=_loads(r[2]),
                status=r[3],
                value=_loads(r[4]),
                error=_loads(r[5]),
                attempts=r[6],
                peak_rss_bytes=r[7],
                worker_id=r[8],
                duration_s=r[9],
                finished_at=r[10],
                seed=seeds.get(r[1]),
            )
            for r in rows
        ]

    def attempts(self, run_id: int, index: int | None = None) -> list[AttemptRecord]:
        """The run's attempts (of one trial when ``index`` is given), in the order they started."""
        query = (
            "SELECT run_id, idx, attempt, worker_id, status, error_json, peak_rss_bytes, duration_s,"
            " started_at, finished_at FROM attempts WHERE run_id=?"
        )
        args: tuple[Any, ...] = (run_id,)
        if index is not None:
            query += " AND idx=?"
            args += (index,)
        with self._read() as conn:
            rows = conn.execute(query + " ORDER BY attempt_pk", args).fetchall()
        return [
            AttemptRecord(
                run_id=r[0],
                index=r[1],
                attempt=r[2],
                worker_id=r[3],
                status=r[4],
                error=_loads(r[5]),
                peak_rss_bytes=r[6],
                duration_s=r[7],
                started_at=r[8],
                finished_at=r[9],
            )
            for r in rows
        ]

    def _require_trial(self, conn: sqlite3.Connection, run_id: int, index: int) -> None:
        if conn.execute("SELECT 1 FROM trials WHERE run_id=? AND idx=?", (run_id, index)).fetchone() is None:
            raise StoreError(f"no trial {index} in run id {run_id} of store {self._shown}", path=self._shown)

    # -- workers ------------------------------------------------------------------------------

    def start_worker(self, run_id: int, worker_id: int, pid: int, config: dict[str, Any]) -> None:
        """Record that worker ``worker_id`` (process ``pid``) started with ``config``."""
        _check_int(run_id, "run_id")
        _check_int(worker_id, "worker_id")
        _check_int(pid, "pid")
        config_json = _dumps(config if config is not None else {}, "worker config")
        now = time.time()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO workers (run_id, worker_id, pid, config_json, started_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, worker_id, pid, config_json, now),
            )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def end_worker(self, run_id: int, worker_id: int, *, reason: str, detail: dict[str, Any] | None) -> bool:
        """Record why the worker ended (a key of :data:`WORKER_REASONS`) with numbers in ``detail``.

        Returns:
            True when recorded; False when that worker was not open (already ended, or never started).
        """
        _check_int(run_id, "run_id")
        _check_int(worker_id, "worker_id")
        if reason not in WORKER_REASONS:
            raise ConfigError(f"worker end reason {reason!r} is not one of {', '.join(WORKER_REASONS)}")
        detail_json = _dumps(detail, "worker detail") if detail is not None else None
        now = time.time()
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE workers SET ended_at=?, reason=?, detail_json=? WHERE worker_pk=(SELECT max(worker_pk)"
                " FROM workers WHERE run_id=? AND worker_id=? AND ended_at IS NULL)",
                (now, reason, detail_json, run_id, worker_id),
            )
            if cur.rowcount == 0:
                logger.debug("end_worker: worker %s of run %s is not open", worker_id, run_id)
                return False
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))
        return True

    def workers(self, run_id: int) -> list[WorkerRecord]:
        """The run's workers in the order they started."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT run_id, worker_id, pid, config_json, started_at, ended_at, reason, detail_json"
                " FROM workers WHERE run_id=? ORDER BY worker_pk",
                (run_id,),
            ).fetchall()
        return [
            WorkerRecord(
                run_id=r[0],
                worker_id=r[1],
                pid=r[2],
                config=_loads(r[3]) or {},
                started_at=r[4],
                ended_at=r[5],
                reason=r[6],
                detail=_loads(r[7]),
            )
            for r in rows
        ]

    # -- events -------------------------------------------------------------------------------

    def add_event(
        self,
        run_id: int,
        kind: str,
        message: str,
        *,
        data: dict[str, Any] | None = None,
        worker_id: int | None = None,
        index: int | None = None,
    ) -> None:
        """Append an event (``kind`` a short word such as ``"recycle"``, ``message`` one line for people)."""
        _check_int(run_id, "run_id")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"event kind must be a non-empty string, not {kind!r}")
        if not isinstance(message, str):
            raise ConfigError(f"event message must be a string, not {type(message).__name__}")
        if worker_id is not None:
            _check_int(worker_id, "worker_id")
        if index is not None:
            _check_int(index, "index")
        data_json = _dumps(data, "event data") if data is not None else None
        with self._write() as conn:
            self._event_json(conn, run_id, kind, message, data_json, worker_id, index, time.time())

    def _event(
        self,
        conn: sqlite3.Connection,
        run_id: int,
        kind: str,
        message: str,
        data: dict[str, Any] | None,
        worker_id: int | None,
        index: int | None,
        now: float,
    ) -> None:
        self._event_json(
            conn,
            run_id,
            kind,
            message,
            _dumps(data, "event data") if data is not None else None,
            worker_id,
            index,
            now,
        )

    @staticmethod
    def _event_json(
        conn: sqlite3.Connection,
        run_id: int,
        kind: str,
        message: str,
        data_json: str | None,
        worker_id: int | None,
        index: int | None,
        now: float,
    ) -> None:
        conn.execute(
            "INSERT INTO events (run_id, time, kind, message, data_json, worker_id, idx) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, now, kind, message, data_json, worker_id, index),
        )
        conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def events(
        self,
        run_id: int,
        *,
        limit: int | None = None,
        kinds: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
    ) -> list[EventRecord]:
        """The run's events, oldest first; with ``limit``, only the newest ``limit`` of them; with
        ``kinds``, only those kinds; with ``exclude``, none of those kinds."""
        query = "SELECT event_id, run_id, time, kind, message, data_json, worker_id, idx FROM events WHERE run_id=?"
        args: list[Any] = [run_id]
        if kinds:
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        if exclude:
            query += f" AND kind NOT IN ({','.join('?' * len(exclude))})"
            args.extend(exclude)
        query += " ORDER BY event_id DESC"
        if limit is not None:
            query += " LIMIT ?"
            args.append(_check_int(limit, "limit", minimum=0))
        with self._read() as conn:
            rows = conn.execute(query, args).fetchall()
        return [
            EventRecord(
                event_id=r[0],
                run_id=r[1],
                time=r[2],
                kind=r[3],
                message=r[4],
                data=_loads(r[5]),
                worker_id=r[6],
                index=r[7],
            )
            for r in reversed(rows)
        ]

    # -- samples ------------------------------------------------------------------------------

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
        query = "SELECT time, worker_id, rss_bytes, uss_bytes, gpu_bytes FROM samples WHERE run_id=?"
        args: tuple[Any, ...] = (run_id,)
        if worker_id is not None:
            query += " AND worker_id=?"
            args += (worker_id,)
        with self._read() as conn:
            rows = conn.execute(query + " ORDER BY time, worker_id", args).fetchall()
        return [
            Sample(time=r[0], worker_id=r[1], rss_bytes=r[2], uss_bytes=r[3], gpu_bytes=r[4]) for r in rows
        ]

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

    # -- fitted sizes ----------------------------------------------------------------------------

    def remember_size(
        self,
        fn_ref: str,
        params_key: str,
        device: str,
        key: str,
        size: int,
        *,
        peak_rss_bytes: int | None = None,
        source: str = "shrink",
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Remember that ``key=size`` fitted ``fn_ref`` with these params on this device (replaces
        what was remembered for the same four)."""
        size = _check_int(size, "size", minimum=1)
        if source not in ("shrink", "fit"):
            raise ConfigError(f"source={source!r} must be 'shrink' or 'fit'")
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO fitted_sizes (fn_ref, params_key, device, key, size, peak_rss_bytes, "
                "source, detail_json, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fn_ref,
                    params_key,
                    device,
                    key,
                    size,
                    peak_rss_bytes,
                    source,
                    None if detail is None else _dumps(detail, "detail"),
                    time.time(),
                ),
            )

    def fitted_size(self, fn_ref: str, params_key: str, device: str, key: str) -> FittedSize | None:
        """What :meth:`remember_size` stored for these four, or None."""
        rows = self._fitted(
            "WHERE fn_ref=? AND params_key=? AND device=? AND key=?", (fn_ref, params_key, device, key)
        )
        return rows[0] if rows else None

    def fitted_sizes(self, fn_ref: str | None = None) -> list[FittedSize]:
        """Every remembered size (of one function when ``fn_ref`` is given), newest first."""
        if fn_ref is None:
            return self._fitted("", ())
        return self._fitted("WHERE fn_ref=?", (fn_ref,))

    def _fitted(self, where: str, args: tuple[Any, ...]) -> list[FittedSize]:
        with self._read() as conn:
            try:
                rows = conn.execute(
                    "SELECT fn_ref, params_key, device, key, size, peak_rss_bytes, source, detail_json, updated_at "
                    f"FROM fitted_sizes {where} ORDER BY updated_at DESC",
                    args,
                ).fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):  # a store written before the table existed (reader)
                    return []
                raise
        return [
            FittedSize(
                fn_ref=fn_ref,
                params_key=params_key,
                device=device,
                key=key,
                size=size,
                peak_rss_bytes=peak,
                source=source,
                detail=_loads(detail),
                updated_at=updated_at,
            )
            for fn_ref, params_key, device, key, size, peak, source, detail, updated_at in rows
        ]

    # -- seeds and stages -------------------------------------------------------------------------

    def set_trial_seeds(self, run_id: int, seeds: dict[int, int]) -> None:
        """Record the seed each trial runs with (``{index: seed}``; replaces earlier values)."""
        _check_int(run_id, "run_id")
        rows = [
            (run_id, _check_int(i, "index", minimum=0), _check_int(s, "seed", minimum=0))
            for i, s in seeds.items()
        ]
        with self._write() as conn:
            conn.executemany("INSERT OR REPLACE INTO trial_seeds (run_id, idx, seed) VALUES (?, ?, ?)", rows)

    def trial_seeds(self, run_id: int) -> dict[int, int]:
        """``{index: seed}`` of the run's seeded trials (empty for a run without a seed)."""
        with self._read() as conn:
            try:
                rows = conn.execute("SELECT idx, seed FROM trial_seeds WHERE run_id=?", (run_id,)).fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):  # a store written before the table existed (reader)
                    return {}
                raise
        return {int(i): int(s) for i, s in rows}

    def run_uuid(self, run_id: int) -> str:
        """The run's UUID (made and recorded the first time it is asked for): what binds its
        checkpoints to it."""
        _check_int(run_id, "run_id")
        with self._write() as conn:
            row = conn.execute("SELECT uuid FROM run_uuids WHERE run_id=?", (run_id,)).fetchone()
            if row is not None:
                return str(row[0])
            made = uuid.uuid4().hex
            conn.execute("INSERT INTO run_uuids (run_id, uuid) VALUES (?, ?)", (run_id, made))
            return made

    def session_settings(self, run_id: int) -> list[SessionSettings]:
        """The settings each session of a run ran with, first session first (empty for a store
        written before they were kept)."""
        with self._read() as conn:
            try:
                rows = conn.execute(
                    "SELECT run_id, session, config_json, started_at FROM session_settings WHERE run_id=?"
                    " ORDER BY session",
                    (run_id,),
                ).fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):
                    return []
                raise
        return [SessionSettings(int(r), int(s), json.loads(c), float(t)) for r, s, c, t in rows]

    def add_stage(
        self,
        run_id: int,
        index: int,
        attempt: int,
        stage: int,
        *,
        event: str,
        worker_id: int | None = None,
        rss_bytes: int | None = None,
        peak_rss_bytes: int | None = None,
        note: str | None = None,
    ) -> None:
        """Record a staged trial's ``checkpoint`` (stage ``stage`` committed), ``resume`` (from
        stage ``stage``) or ``restart`` (from the beginning; ``note`` says why)."""
        _check_int(run_id, "run_id")
        _check_int(index, "index", minimum=0)
        _check_int(attempt, "attempt", minimum=1)
        _check_int(stage, "stage", minimum=0)
        if event not in STAGE_EVENTS:
            raise ConfigError(f"stage event {event!r} is not one of {', '.join(STAGE_EVENTS)}")
        now = time.time()
        with self._write() as conn:
            self._require_trial(conn, run_id, index)
            conn.execute(
                "INSERT INTO stages (run_id, idx, attempt, stage, worker_id, time, rss_bytes, peak_rss_bytes,"
                " event, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, index, attempt, stage, worker_id, now, rss_bytes, peak_rss_bytes, event, note),
            )
            conn.execute("UPDATE runs SET updated_at=? WHERE run_id=?", (now, run_id))

    def stages(self, run_id: int, index: int | None = None) -> list[StageRecord]:
        """A run's stage history (of one trial when ``index`` is given), in the order written."""
        query = (
            "SELECT run_id, idx, attempt, stage, worker_id, time, rss_bytes, peak_rss_bytes, event, note"
            " FROM stages WHERE run_id=?"
        )
        args: tuple[Any, ...] = (run_id,)
        if index is not None:
            query += " AND idx=?"
            args += (index,)
        with self._read() as conn:
            try:
                rows = conn.execute(query + " ORDER BY stage_pk", args).fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):
                    return []
                raise
        return [StageRecord(*row) for row in rows]


def _record_session(
    conn: sqlite3.Connection, run_id: int, session: int, config_json: str, now: float
) -> None:
    try:
        conn.execute(
            "INSERT OR REPLACE INTO session_settings (run_id, session, config_json, started_at) VALUES (?, ?, ?, ?)",
            (run_id, session, config_json, now),
        )
    except sqlite3.OperationalError as err:  # pragma: no cover - the table is made with the schema
        logger.warning("cannot record the session's settings: %s", err)


def _session_change(
    conn: sqlite3.Connection, run_id: int, old: tuple[Any, ...], config_json: str, now: float
) -> dict[str, list[Any]]:
    """Record the resumed session's settings (and the earlier session's, for a store written
    before they were kept); what differs from the last session's, ``{key: [old, new]}``."""
    old_json, sessions, created_at = old
    known = conn.execute("SELECT count(*) FROM session_settings WHERE run_id=?", (run_id,)).fetchone()[0]
    if not known:
        _record_session(conn, run_id, int(sessions), old_json, float(created_at))
    _record_session(conn, run_id, int(sessions) + 1, config_json, now)
    before, after = json.loads(old_json), json.loads(config_json)
    if not isinstance(before, dict) or not isinstance(after, dict):
        return {}
    return {
        key: [before.get(key), after.get(key)]
        for key in sorted(set(before) | set(after))
        if _canonical(before.get(key)) != _canonical(after.get(key))
    }


def settings_change_words(changed: dict[str, list[Any]]) -> str:
    """``workers 2 → 1, memory_limit 6GB → None``."""
    return ", ".join(f"{key} {json.dumps(old)} → {json.dumps(new)}" for key, (old, new) in changed.items())


_RUN_SELECT = (
    "SELECT run_id, name, fn_ref, status, config_json, trial_count, created_at, updated_at, finished_at, sessions"
    " FROM runs"
)

# SQLite's two-argument max() is NULL when either side is NULL; coalesce keeps the known reading.
_UPSERT_SAMPLE = (
    "INSERT INTO samples (run_id, worker_id, bucket, time, rss_bytes, uss_bytes, gpu_bytes)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, worker_id, bucket) DO UPDATE SET"
    " time = CASE WHEN excluded.rss_bytes > samples.rss_bytes THEN excluded.time ELSE samples.time END,"
    " rss_bytes = max(samples.rss_bytes, excluded.rss_bytes),"
    " uss_bytes = max(coalesce(samples.uss_bytes, excluded.uss_bytes), coalesce(excluded.uss_bytes, samples.uss_bytes)),"
    " gpu_bytes = max(coalesce(samples.gpu_bytes, excluded.gpu_bytes), coalesce(excluded.gpu_bytes, samples.gpu_bytes))"
)


def _work_times(conn: sqlite3.Connection, run_id: int | None) -> dict[int, tuple[list[float], list[float]]]:
    """Per run: the start time of each session (``run_started``/``run_resumed`` events) and the
    time of everything recorded (events, attempts, workers), for :func:`_work_s`."""
    where = "WHERE run_id=?" if run_id is not None else ""
    args = (run_id,) if run_id is not None else ()
    out: dict[int, tuple[list[float], list[float]]] = {}
    for rid, t in conn.execute(
        f"SELECT run_id, time FROM events {where} AND kind IN ('run_started', 'run_resumed')"
        if where
        else "SELECT run_id, time FROM events WHERE kind IN ('run_started', 'run_resumed')",
        args,
    ):
        out.setdefault(rid, ([], []))[0].append(t)
    activity = " UNION ALL ".join(
        f"SELECT run_id, {column} FROM {table} {where}"
        for table, column in (
            ("events", "time"),
            ("attempts", "started_at"),
            ("attempts", "finished_at"),
            ("workers", "started_at"),
            ("workers", "ended_at"),
        )
    )
    for rid, t in conn.execute(activity, args * 5):
        if t is not None and rid in out:
            out[rid][1].append(t)
    return out


def _work_s(work: tuple[list[float], list[float]] | None, created: float, last: float) -> float:
    """A run's duration as the sum of its sessions' working time, not the time since it first started.

    Each session runs from its start to the last thing recorded before the next session started
    (a supervisor killed mid-run records no end; what it recorded last bounds its work).
    """
    if not work or not work[0]:
        return max(0.0, last - created)
    import bisect

    starts = sorted(work[0])
    times = sorted(work[1])
    total = 0.0
    for i, start in enumerate(starts):
        end_limit = starts[i + 1] if i + 1 < len(starts) else float("inf")
        j = bisect.bisect_left(times, end_limit)
        end = times[j - 1] if j > 0 else start
        if end_limit == float("inf"):
            end = max(end, last)
        total += max(0.0, end - start)
    return total


def _max_or_none(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _ddl_statements() -> list[str]:
    lines = [
        line
        for line in (DDL + PEAK_TABLE_DDL + BYTES_IN_USE_TABLE_DDL).splitlines()
        if not line.strip().startswith("--")
    ]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    return RunInfo(
        run_id=row[0],
        name=row[1],
        fn_ref=row[2],
        status=row[3],
        config=_loads(row[4]) or {},
        trial_count=row[5],
        created_at=row[6],
        updated_at=row[7],
        finished_at=row[8],
        sessions=row[9],
    )


def _replace_run(info: RunInfo, *, resumed: bool) -> RunInfo:
    from dataclasses import replace

    return replace(info, resumed=resumed)
