"""The store's runs (one per sweep, resumed by name), the settings of each session that ran them, and trial seeds.

One table's section of :class:`~trainguard.store.Store` (see ``_base.py``).
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time
import uuid
from collections.abc import Sequence
from typing import Any

from trainguard._text import require_utf8, utf8_problem
from trainguard.exceptions import ConfigError, StoreError
from trainguard.store._base import StoreRows
from trainguard.store._codec import _canonical, _check_int, _dumps, _loads_object, _record_of_row
from trainguard.store._lock import RunLock
from trainguard.store._records import RunInfo, RunSummary, SessionSettings

logger = logging.getLogger("trainguard.store._store")


class RunRows(StoreRows):
    """The store's runs (one per sweep, resumed by name), the settings of each session that ran them, and trial seeds."""

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
        interrupted_workers, interrupted_attempts = _close_open(conn, run_id, now)
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
        if changed:  # said to the user by the session (a SettingsChangedWarning), recorded here
            data["settings_changed"] = changed
            said = ", with other settings: " + settings_change_words(changed) + " (each trial keeps its own)"
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
        ``run_finished`` event that ``trainguard show`` lists. Attempts still open are marked
        ``interrupted``, as a resume would mark them: the run has ended, so they ended with it (a
        trial Ctrl-C stopped stays pending; its attempt is not left ``running``).

        Raises:
            ConfigError: a bad ``status`` or ``reason``.
            StoreError: no run ``run_id`` in this store.
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
            _close_open_attempts(conn, run_id, now)
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
                # a RunSummary's fields up to finished_at, in its fields' order (read positionally),
                # then the run's sessions and its trials' highest peak
                "SELECT r.run_id, r.name, r.fn_ref, r.status, r.trial_count,"
                " coalesce(sum(t.status='ok'), 0), coalesce(sum(t.status='failed'), 0),"
                " coalesce(sum(t.status='pending'), 0), r.created_at, r.updated_at, r.finished_at,"
                " r.sessions, max(t.peak_rss_bytes)"
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
        for *leading, sessions, trial_peak in rows:
            rid, (created, updated, finished) = leading[0], leading[-3:]
            peaks = [p for p in (trial_peak, sample_peaks.get(rid), attempt_peaks.get(rid)) if p is not None]
            duration_s = _work_s(work.get(rid), created, finished if finished is not None else updated)
            peak = max(peaks) if peaks else None
            # a RunSummary's fields in order: the row's leading columns, then duration_s,
            # peak_rss_bytes, workers_started and sessions
            fields = [*leading, duration_s, peak, int(workers.get(rid, 0)), sessions]
            out.append(RunSummary(*fields))
        return out

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
        rows = self._rows_if_table(
            "SELECT run_id, session, config_json, started_at FROM session_settings WHERE run_id=?"
            " ORDER BY session",
            (run_id,),
        )
        return [SessionSettings(int(r), int(s), json.loads(c), float(t)) for r, s, c, t in rows]

    def trial_sessions(self, run_id: int) -> dict[int, int]:
        """``{index: session}``: the session whose settings each trial ran under (its latest
        attempt's). Trials never started are absent; so are the attempts of a store written before
        sessions were recorded that cannot be placed (a run resumed before session settings were
        kept), read by a reader that may not fill them in."""
        recorded = "session"
        inferred = (
            "coalesce((SELECT max(s.session) FROM session_settings s WHERE s.run_id = a.run_id"
            " AND s.started_at <= a.started_at),"
            " (SELECT r.sessions FROM runs r WHERE r.run_id = a.run_id AND r.sessions = 1))"
        )
        only_one = "(SELECT r.sessions FROM runs r WHERE r.run_id = a.run_id AND r.sessions = 1)"
        with self._read() as conn:
            rows = None
            for column in (recorded, inferred, only_one):
                try:
                    rows = conn.execute(
                        f"SELECT idx, {column} FROM attempts a WHERE run_id=? ORDER BY attempt_pk", (run_id,)
                    ).fetchall()
                    break
                except sqlite3.OperationalError as err:  # an older store, read only: no column
                    if "no such" not in str(err):
                        raise
        return {int(i): int(s) for i, s in rows or () if s is not None}

    def trials_in_sessions(self, run_id: int) -> dict[int, int]:
        """``{session: trials}``: how many of the run's trials ran (their latest attempt) in each
        session, counted by SQLite (a million-trial run is not read into memory)."""
        with self._read() as conn:
            try:
                rows = conn.execute(
                    "SELECT session, count(*) FROM attempts a WHERE run_id=? AND session IS NOT NULL"
                    " AND attempt_pk=(SELECT max(attempt_pk) FROM attempts b WHERE b.run_id=a.run_id AND b.idx=a.idx)"
                    " GROUP BY session",
                    (run_id,),
                ).fetchall()
            except sqlite3.OperationalError as err:  # an older store, read only: no column
                if "no such" not in str(err):
                    raise
                return {}
        return {int(s): int(n) for s, n in rows}

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
        rows = self._rows_if_table("SELECT idx, seed FROM trial_seeds WHERE run_id=?", (run_id,))
        return {int(i): int(s) for i, s in rows}


def _close_open(conn: sqlite3.Connection, run_id: int, now: float) -> tuple[int, int]:
    """Mark the workers and attempts of ``run_id`` that no session recorded the end of
    ``interrupted``; returns how many of each."""
    workers = conn.execute(
        "UPDATE workers SET ended_at=?, reason='interrupted' WHERE run_id=? AND ended_at IS NULL",
        (now, run_id),
    ).rowcount
    return workers, _close_open_attempts(conn, run_id, now)


def _close_open_attempts(conn: sqlite3.Connection, run_id: int, now: float) -> int:
    """Mark the attempts of ``run_id`` whose end no session recorded ``interrupted``; how many."""
    return int(
        conn.execute(
            "UPDATE attempts SET finished_at=?, status='interrupted' WHERE run_id=? AND finished_at IS NULL",
            (now, run_id),
        ).rowcount
    )


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
    from trainguard._settings_change import setting_changes

    changes = setting_changes(json.loads(old_json), json.loads(config_json))
    return {name: [before, after] for name, before, after in changes}


def settings_change_words(changed: dict[str, list[Any]], *, flags: bool = False) -> str:
    """``memory_limit 2GB → 3GB, workers 1 → 2`` (``flags``: ``--memory-limit 2GB → 3GB, ...``) of a
    ``run_resumed`` event's ``settings_changed``; an older store's whole-policy entries are compared
    leaf by leaf."""
    from trainguard._settings_change import change_words, setting_changes

    before = {key: pair[0] for key, pair in changed.items()}
    after = {key: pair[1] for key, pair in changed.items()}
    return change_words(setting_changes(before, after), flags=flags)


#: the columns of a :class:`RunInfo`, in its fields' order (a row is read positionally)
_RUN_SELECT = (
    "SELECT run_id, name, fn_ref, status, config_json, trial_count, created_at, updated_at, finished_at, sessions"
    " FROM runs"
)


def _work_times(conn: sqlite3.Connection, run_id: int | None) -> dict[int, tuple[list[float], list[float]]]:
    """Per run: the start time of each session (``run_started``/``run_resumed`` events) and, for
    each session, the time of the last thing recorded (events, attempts, workers) before the next
    session started, for :func:`_work_s`. Asked of SQLite session by session: a run of a million
    trials has millions of such times, which never come into this process."""
    where = "WHERE run_id=? AND" if run_id is not None else "WHERE"
    args = (run_id,) if run_id is not None else ()
    starts: dict[int, list[float]] = {}
    for rid, t in conn.execute(
        f"SELECT run_id, time FROM events {where} kind IN ('run_started', 'run_resumed')", args
    ):
        starts.setdefault(rid, []).append(t)
    out: dict[int, tuple[list[float], list[float]]] = {}
    for rid, times in starts.items():
        ordered = sorted(times)
        limits = [*ordered[1:], None]
        out[rid] = (ordered, [_last_activity(conn, rid, limit) for limit in limits])
    return out


_ACTIVITY = (
    ("events", "time"),
    ("attempts", "started_at"),
    ("attempts", "finished_at"),
    ("workers", "started_at"),
    ("workers", "ended_at"),
)


def _last_activity(conn: sqlite3.Connection, run_id: int, before: float | None) -> float:
    """The time of the last thing the run recorded before ``before`` (all of it for None); -inf
    when nothing was."""
    bound = "" if before is None else " AND {column} < ?"
    parts = [
        f"SELECT max({column}) FROM {table} WHERE run_id=?" + bound.format(column=column)
        for table, column in _ACTIVITY
    ]
    args: list[Any] = []
    for _ in _ACTIVITY:
        args.extend((run_id,) if before is None else (run_id, before))
    values = [v for (v,) in conn.execute(" UNION ALL ".join(parts), args) if v is not None]
    return max(values) if values else -math.inf


def _work_s(work: tuple[list[float], list[float]] | None, created: float, last: float) -> float:
    """A run's duration as the sum of its sessions' working time, not the time since it first started.

    Each session runs from its start to the last thing recorded before the next session started
    (a supervisor killed mid-run records no end; what it recorded last bounds its work).
    ``work``: the sessions' starts, in order, and the last time recorded before each next start.
    """
    if not work or not work[0]:
        return max(0.0, last - created)
    starts, ends = work
    total = 0.0
    for i, start in enumerate(starts):
        end = ends[i] if ends[i] != -math.inf else start
        if i == len(starts) - 1:
            end = max(end, last)
        total += max(0.0, end - start)
    return total


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    return _record_of_row(RunInfo, row, config=_loads_object)


def _replace_run(info: RunInfo, *, resumed: bool) -> RunInfo:
    from dataclasses import replace

    return replace(info, resumed=resumed)
