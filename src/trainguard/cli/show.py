"""``trainguard show RUN``: one run in detail: trials, workers and why each ended, recent events."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from trainguard.outcomes import EventKind, plain_record

if TYPE_CHECKING:
    from trainguard.store import EventRecord, TrialRecord, WorkerRecord

HELP = "show one run: summary, per-trial results and memory, workers and why they ended, recent events"


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_run_in_store

    add_run_in_store(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--events", type=int, default=10, metavar="N", help="how many recent events to show (default 10)"
    )
    parser.add_argument(
        "--trial",
        type=int,
        metavar="N",
        help="show trial N's attempts and, for each killed, crashed or out-of-memory one, its flight recorder",
    )
    parser.add_argument(
        "--max-trials",
        type=int,
        default=50,
        metavar="N",
        help="show at most N trials in the table (default 50; --json has them all)",
    )


def run(args: argparse.Namespace) -> int:
    from trainguard.exceptions import ConfigError
    from trainguard.store import Store

    if args.events < 0 or args.max_trials < 0:
        raise ConfigError("--events and --max-trials must be >= 0, e.g. --events 20")
    if args.trial is not None and args.trial < 0:
        raise ConfigError(f"--trial {args.trial} must be a trial index >= 0, e.g. --trial 0")
    with Store(args.store, readonly=True) as store:
        info = _find_run(store, args)
        if args.json:
            return _print_json(_read_run(store, args, info), args)
        if args.trial is not None:
            return _print_one_trial(store, info, args)
        # the tables read in bounded memory: a page of trials, the rest counted or folded in SQL
        _print_view(store, info, args)
    return 0


def _no_trial(name: str, index: int, count: int) -> Exception:
    from trainguard.exceptions import ConfigError

    return ConfigError(f"run {name!r} has no trial {index}: its trials are 0 .. {count - 1}")


def _print_json(v: dict[str, Any], args: argparse.Namespace) -> int:
    """``show --json``: every trial, attempt and event of the run (its size is the output's)."""
    from trainguard.cli._display import to_json
    from trainguard.cli._flight import attempt_rows

    summary, trials = v["summary"], v["trials"]
    assert summary is not None
    if args.trial is not None and not any(t.index == args.trial for t in trials):
        raise _no_trial(summary.name, args.trial, len(trials))
    v["attempt_json"] = attempt_rows(v["attempts"])
    memory_events = v["memory_events"]
    v["peak_events"] = [e for e in memory_events if e.kind in PEAK_EVENT_KINDS]
    v["fragmentation"], v["oom"] = memory_rows([e for e in memory_events if e.kind not in PEAK_EVENT_KINDS])
    print(to_json(_json_payload(v), indent=2))
    return 0


def _print_one_trial(store: Any, info: Any, args: argparse.Namespace) -> int:
    """``show RUN --trial N``: trial N's attempts and flight recorders, and the run's pressure events."""
    from trainguard.cli._flight import attempt_rows, print_trial

    if not store.has_trial(info.run_id, args.trial):
        raise _no_trial(info.name, args.trial, store.trial_count(info.run_id))
    pressure = store.events(info.run_id, kinds=list(EventKind.in_view("pressure")))
    print_trial(args.trial, attempt_rows(store.attempts(info.run_id, args.trial)), pressure)
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class TrialPage:
    """The trials ``show`` lists (the first ``--max-trials``) and what of the whole run decides
    the table's columns and caption: each ``*_column`` says whether any trial of the run has it."""

    trials: tuple[TrialRecord, ...]
    total: int
    seeded: bool
    trial_memory: dict[int, dict[str, Any]]
    memory_column: bool
    predictions: dict[int, dict[str, Any]]
    predicted_column: bool
    in_use_after: dict[int, int]
    in_use_column: bool


def _trial_page(store: Any, run_id: int, limit: int) -> TrialPage:
    trials = tuple(store.trial_page(run_id, limit))
    first, last = (trials[0].index, trials[-1].index) if trials else (0, -1)
    memory_column = store.has_trial_memory(run_id)
    predicted_column = store.has_predictions(run_id)
    in_use_column = store.has_bytes_in_use(run_id)
    return TrialPage(
        trials=trials,
        total=store.trial_count(run_id),
        seeded=store.has_seeds(run_id),
        trial_memory=store.trial_memory(run_id, first, last) if memory_column else {},
        memory_column=memory_column,
        predictions=store.predictions(run_id, first=first, last=last) if predicted_column else {},
        predicted_column=predicted_column,
        in_use_after=store.bytes_in_use_after(run_id, first, last) if in_use_column else {},
        in_use_column=in_use_column,
    )


def _in_use_trends(store: Any, run_id: int) -> list[dict[str, Any]]:
    from trainguard.cli._bytes_in_use import worker_trend

    return [worker_trend(w, allocator, values) for w, allocator, values in store.bytes_in_use_series(run_id)]


def _print_view(store: Any, info: Any, args: argparse.Namespace) -> None:
    """The run's tables, as they always were, from reads each bounded whatever the run's size."""
    from trainguard.cli._bytes_in_use import trend_lines
    from trainguard.cli._display import console
    from trainguard.cli._display import markup_safe as escape
    from trainguard.cli._flight import print_pressure
    from trainguard.store import interrupted_note

    run_id = info.run_id
    summary = store.summary(run_id)
    workers = store.workers(run_id)
    page = _trial_page(store, run_id, args.max_trials)
    pressure = list(EventKind.in_view("pressure"))
    out = console(pipe_width=160)  # the trials table has a params column: lines stay whole in a file
    _print_summary(out, info, summary, store.sample_overview(run_id, SPARK_WIDTH))
    out.print(_trials_table(page))
    causes = {w.worker_id: (w.detail or {}).get("cause") for w in workers}
    for line in trend_lines((), causes, workers=_in_use_trends(store, run_id)):
        out.print(escape(line))
    if workers:
        out.print(_workers_table(workers))
    events = store.events(run_id, limit=args.events, exclude=(*POOL_EVENT_KINDS, *pressure))
    if events:
        out.print(_events_table(events))
    _print_sessions(store, run_id)
    note = interrupted_note(store.path, info.name, summary.status if summary else "")
    if note:
        console().print(f"{escape(info.name)}: {escape(note)}")
    print_pressure(console(pipe_width=160), store.events(run_id, kinds=pressure))
    oom_kinds = [k for k in MEMORY_EVENT_KINDS if k != "trial_stats" and k not in PEAK_EVENT_KINDS]
    _, oom = memory_rows(store.events(run_id, kinds=oom_kinds))
    _print_memory(store.fragmentation_tail(run_id, SHOWN_ROWS), oom)
    _print_peaks(store.events_newest(run_id, PEAK_EVENT_KINDS, SHOWN_ROWS))
    _print_pool(store.events(run_id, kinds=POOL_EVENT_KINDS))
    stages = store.stages(run_id)
    if stages:
        _print_stages(stages)


#: how many rows the fragmentation and peak-model tables show (the newest)
SHOWN_ROWS = 50
#: the columns of the summary's RSS sparkline
SPARK_WIDTH = 80


def _find_run(store: Any, args: argparse.Namespace) -> Any:
    """The run named (or numbered) on the command line, or a one-line error listing the known ones."""
    from trainguard.exceptions import ConfigError

    info = store.get_run(args.run_name)
    if info is None and args.run_name.isdigit():
        info = store.get_run_by_id(int(args.run_name))
    if info is None:
        names = [s.name for s in store.list_runs()]
        hint = f"known runs: {', '.join(names[-5:])}" if names else "the store has no runs yet"
        # the message is printed through visible() by cli.main: names with escapes stay inert
        raise ConfigError(
            f"no run named {args.run_name!r} in {args.store} ({hint}): `trainguard runs --store {args.store}` lists them"
        )
    return info


def _read_run(store: Any, args: argparse.Namespace, info: Any) -> dict[str, Any]:
    """Everything ``show --json`` prints of one run, read in one pass over the store."""
    from trainguard.report import RunRecords
    from trainguard.store import interrupted_note

    run_id = info.run_id
    # the run's own rows, read as the run report reads them
    records = RunRecords.from_store(store, info)
    summary, trials = records.summary, records.trials
    sessions = store.session_settings(run_id)
    pressure = list(EventKind.in_view("pressure"))
    return {
        "records": records,
        "info": info,
        "summary": summary,
        "trials": trials,
        "workers": records.workers,
        # the pool's events have their own table (and JSON key), each once: not among the recent
        # ones; the pressure events too: they have their own section, said once
        "events": store.events(run_id, limit=args.events, exclude=(*POOL_EVENT_KINDS, *pressure)),
        "samples": store.samples(run_id),
        "stages": store.stages(run_id),
        "trial_memory": _trial_memory(store.events(run_id, kinds=["trial_stats"])),
        "memory_events": store.events(run_id, kinds=MEMORY_EVENT_KINDS),
        "pool_events": store.events(run_id, kinds=POOL_EVENT_KINDS),
        "pressure_events": store.events(run_id, kinds=pressure),
        "attempts": store.attempts(run_id, args.trial),
        "predictions": store.predictions(run_id),
        "bytes_in_use": store.bytes_in_use(run_id),
        "note": interrupted_note(store.path, info.name, summary.status if summary else ""),
        "sessions": sessions,
        "trial_sessions": store.trial_sessions(run_id),
    }


def _json_payload(v: dict[str, Any]) -> dict[str, Any]:
    """``show --json``: the fields as before, each section under its key."""
    from trainguard.cli._bytes_in_use import bytes_in_use_json

    samples = v["samples"]
    return {
        "run": {**dataclasses.asdict(v["summary"]), "note": v["note"]},
        "config": v["info"].config,
        "trials": [{**plain_record(t), "session": v["trial_sessions"].get(t.index)} for t in v["trials"]],
        # the settings each session ran with; a trial ran with its "session"'s
        "sessions": [dataclasses.asdict(s) for s in v["sessions"]],
        "workers": [{**dataclasses.asdict(w), "reason_text": w.reason_text} for w in v["workers"]],
        "events": [dataclasses.asdict(e) for e in v["events"]],
        "stages": [dataclasses.asdict(st) for st in v["stages"]],
        "fragmentation": v["fragmentation"],
        "out_of_memory": v["oom"],
        "pool": [dataclasses.asdict(e) for e in v["pool_events"]],
        # the peak model: each trial's prediction as its last attempt started, and the model's events
        "predictions": {str(k): p for k, p in v["predictions"].items()},
        "peak_model": [dataclasses.asdict(e) for e in v["peak_events"]],
        "memory": {
            "samples": len(samples),
            "peak_rss_bytes": max((s.rss_bytes for s in samples), default=None),
        },
        # per trial, what a Node worker read at the trial's end: tf.memory() and process.memoryUsage()
        "trial_memory": {str(k): m for k, m in v["trial_memory"].items()},
        # every attempt (or trial N's with --trial), each with its "flight_recorder" (None when
        # it ended without a kill, an OOM or a crash)
        "attempts": v["attempt_json"],
        "pressure": [dataclasses.asdict(e) for e in v["pressure_events"]],
        # the worker's C allocator bytes in use after each attempt (empty where it has no such count)
        "bytes_in_use": bytes_in_use_json(v["bytes_in_use"]),
    }


def _trial_memory(events: Any) -> dict[int, dict[str, Any]]:
    """The last Node readings stored for each trial: ``{index: {"tfjs": {...}, "node": {...}}}``."""
    out: dict[int, dict[str, Any]] = {}
    for e in events:
        data = e.data if isinstance(e.data, dict) else {}
        if e.index is not None and ("tfjs" in data or "node" in data):
            out[int(e.index)] = {k: data[k] for k in ("tfjs", "node") if k in data}
    return out


def _memory_text(reading: dict[str, Any] | None) -> str:
    from trainguard.units import format_bytes

    if not reading:
        return "-"
    parts = []
    tf = reading.get("tfjs")
    if tf:
        parts.append(f"{tf.get('numTensors')} tensors, {format_bytes(tf.get('numBytes'))}")
    node = reading.get("node")
    if node:
        parts.append(f"heap {format_bytes(node.get('heapUsed'))}")
    return "; ".join(parts) or "-"


def _trial_outcome(trial) -> str:  # noqa: ANN001 - TrialRecord
    """What the value/error column says, by the trial's status: a failed trial's cause (timeout,
    killed at the memory limit, the exception once), an ok trial's value, a pending trial's last
    attempt's error if it had one."""
    from trainguard.cli._display import error_text, markup_safe, short_value

    if trial.status == "failed":
        return "[red]" + markup_safe(short_value(error_text(trial.error), 80)) + "[/]"
    if trial.status == "pending":
        if trial.error is not None:
            return (
                "[yellow]" + markup_safe(short_value("last attempt: " + error_text(trial.error), 80)) + "[/]"
            )
        return "-"
    return markup_safe(short_value(trial.value, 60))


def _print_summary(
    out: Any, info: Any, summary: Any, samples: tuple[int, float | None, float | None, list[float]]
) -> None:
    """The run's two summary lines and its worker-tree RSS over time (``samples``:
    :meth:`~trainguard.store.Store.sample_overview`)."""
    from trainguard.cli._display import markup_safe as escape
    from trainguard.cli._display import sparkline, when
    from trainguard.units import format_bytes, format_duration

    assert summary is not None  # show reads a run that exists
    run_seed = info.config.get("seed")
    out.print(
        f"[bold]{escape(summary.name)}[/]  {escape(summary.status)}  ({escape(summary.fn_ref)})"
        + (f"   seed {run_seed}" if run_seed is not None else "")
    )
    out.print(
        f"trials: {summary.trials_total} ({summary.trials_ok} ok, {summary.trials_failed} failed, "
        f"{summary.trials_pending} pending)   started {when(summary.created_at)}   "
        f"duration {format_duration(summary.duration_s)}   peak RSS {format_bytes(summary.peak_rss_bytes)}   "
        f"workers {summary.workers_started}"
        + (f"   sessions {summary.sessions}" if summary.sessions > 1 else "")
    )
    # stores written before zombie workers were skipped hold zeros: the overview counts RSS > 0
    count, low, high, pooled = samples
    if count:
        out.print(
            f"worker-tree RSS over time ({count} samples, highest worker per sample): "
            f"{format_bytes(low)} .. {format_bytes(high)}"
        )
        out.print(f"  {sparkline(pooled, SPARK_WIDTH)}")


def _trials_table(page: TrialPage) -> Any:
    from rich.table import Table

    from trainguard.cli._display import markup_safe as escape
    from trainguard.cli._display import short_value
    from trainguard.units import format_bytes, format_duration

    table = Table(title="trials", title_justify="left")
    predictions, trial_memory, after = page.predictions, page.trial_memory, page.in_use_after
    columns: list[tuple[str, Literal["left", "right"]]] = [
        ("#", "right"),
        ("status", "left"),
        ("params", "left"),
        ("value / error", "left"),
        ("attempts", "right"),
        ("peak RSS", "right"),
        ("worker", "right"),
        ("duration", "right"),
    ]
    if page.predicted_column:
        columns.insert(6, ("predicted", "right"))
    if page.seeded:
        columns.append(("seed", "right"))
    if page.memory_column:
        columns.append(("tf.memory / heap at end", "left"))
    if page.in_use_column:
        columns.append(("in use after", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=name not in ("value / error", "params"))
    for t in page.trials:
        style = {"ok": "green", "failed": "red", "pending": "yellow"}.get(t.status, "")
        table.add_row(
            str(t.index),
            f"[{style}]{escape(t.status)}[/]" if style else escape(t.status),
            escape(short_value(t.params, 30)),
            _trial_outcome(t),
            str(t.attempts),
            format_bytes(t.peak_rss_bytes),
            *([_predicted_text(predictions.get(t.index))] if page.predicted_column else []),
            "-" if t.worker_id is None else str(t.worker_id),
            format_duration(t.duration_s),
            *([str(t.seed) if t.seed is not None else "-"] if page.seeded else []),
            *([escape(_memory_text(trial_memory.get(t.index)))] if page.memory_column else []),
            *([format_bytes(after.get(t.index))] if page.in_use_column else []),
        )
    if page.total > len(page.trials):
        table.caption = f"{page.total - len(page.trials)} more trials not shown (--max-trials N or --json)"
    return table


def _workers_table(workers: Sequence[WorkerRecord]) -> Any:
    from rich.table import Table

    from trainguard.cli._display import markup_safe as escape
    from trainguard.cli._display import when
    from trainguard.units import format_duration

    wt = Table(title="workers", title_justify="left")
    # the Ray backend records where each worker ran (host, node); the local one does not
    on_nodes = any((w.config or {}).get("node_id") for w in workers)
    worker_columns = ["worker", "pid", *(["node"] if on_nodes else []), "started", "lived", "ended because"]
    for heading in worker_columns:
        wt.add_column(
            heading,
            no_wrap=heading != "ended because",
            justify="right" if heading in ("worker", "pid", "lived") else "left",
        )
    for w in workers:
        lived = None if w.ended_at is None else w.ended_at - w.started_at
        config = w.config or {}
        node = f"{config.get('host') or '?'} {str(config.get('node_id') or '')[:8]}"
        wt.add_row(
            str(w.worker_id),
            str(w.pid),
            *((escape(node),) if on_nodes else ()),
            when(w.started_at),
            format_duration(lived),
            escape(w.reason_text),
        )
    return wt


def _events_table(events: Sequence[EventRecord]) -> Any:
    from rich.table import Table

    from trainguard.cli._display import markup_safe as escape
    from trainguard.cli._display import when

    et = Table(title=f"recent events (last {len(events)})", title_justify="left")
    for name in ("time", "kind", "message"):
        et.add_column(name, no_wrap=name != "message")
    for e in events:
        et.add_row(when(e.time)[11:], escape(e.kind), escape(e.message))
    return et


#: Events of the pool's shape: workers at once (and why), threads per worker, the memory budget.
POOL_EVENT_KINDS = EventKind.in_view("pool")


def _print_pool(events) -> None:  # noqa: ANN001 - EventRecords
    """Every choice and change of the pool's shape, with its reason (none is cut off)."""
    if not events:
        return
    from rich.table import Table

    from trainguard.cli._display import console, when
    from trainguard.cli._display import markup_safe as escape

    table = Table(title="workers, threads and the memory budget", title_justify="left")
    for name in ("time", "kind", "why"):
        table.add_column(name, no_wrap=name != "why")
    for e in events:
        table.add_row(when(e.time)[11:], escape(e.kind), escape(e.message))
    console(pipe_width=160).print(table)


#: The peak model's events (Policy(predict_peaks=...)): shown in their own table, not as OOM steps.
PEAK_EVENT_KINDS = ("peak_model", "peak_skip", "peak_start", "peak_wrong")


def _predicted_text(prediction: dict[str, Any] | None) -> str:
    from trainguard.units import format_bytes

    if not prediction or prediction.get("peak_bytes") is None:
        return "-"
    acted = {"skipped": " (not run)", "shrunk": " (shrunk)"}.get(str(prediction.get("acted")), "")
    return f"{format_bytes(prediction['peak_bytes'])}{acted}"


def _print_peaks(events) -> None:  # noqa: ANN001 - EventRecords
    """The peak model's story: what it fitted (and which params it ignored, and why), the trials
    it did not start or started smaller, and kills it did not see coming."""
    if not events:
        return
    from rich.table import Table

    from trainguard.cli._display import console
    from trainguard.cli._display import markup_safe as escape

    table = Table(title="peak model", title_justify="left")
    for name in ("trial", "what", "message"):
        table.add_column(name, no_wrap=name != "message")
    words = {
        "peak_model": "model",
        "peak_skip": "not run",
        "peak_start": "started smaller",
        "peak_wrong": "missed",
    }
    for e in events[-50:]:
        table.add_row("-" if e.index is None else str(e.index), words.get(e.kind, e.kind), escape(e.message))
    console(pipe_width=160).print(table)


#: Events that ``show`` turns into its fragmentation and out-of-memory tables.
MEMORY_EVENT_KINDS = EventKind.in_view("memory")


def memory_rows(events) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # noqa: ANN001 - EventRecords
    """Per-trial fragmentation figures (from ``trial_stats`` events) and the out-of-memory
    recovery steps (``oom_*`` events), as JSON-ready rows."""
    fragmentation: list[dict[str, Any]] = []
    oom: list[dict[str, Any]] = []
    for e in events:
        data = e.data or {}
        if e.kind == "trial_stats":
            for row in data.get("fragmentation") or []:
                fragmentation.append({"index": e.index, "worker_id": e.worker_id, **row})
        else:
            oom.append({"index": e.index, "kind": e.kind, "message": e.message, **data})
    return fragmentation, oom


def _print_memory(fragmentation: list[dict[str, Any]], oom: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from trainguard.cli._display import console
    from trainguard.cli._display import markup_safe as escape
    from trainguard.units import format_bytes

    out = console(pipe_width=160)
    if fragmentation:
        ft = Table(
            title="fragmentation (allocator held vs in use, where the framework reports it)",
            title_justify="left",
        )
        for name in ("trial", "framework", "device", "held", "in use", "held - in use", "inactive split"):
            ft.add_column(name, justify="left" if name in ("framework", "device") else "right")
        for row in fragmentation[-50:]:
            if row.get("framework") == "torch":
                held, used = row.get("reserved_bytes"), row.get("allocated_bytes")
                split = format_bytes(row.get("inactive_split_bytes"))
            else:  # TensorFlow: the peak since the last trial against what is in use now
                held, used = row.get("peak_bytes"), row.get("current_bytes")
                split = "-"
            gap = None if held is None or used is None else held - used
            ft.add_row(
                "-" if row.get("index") is None else str(row["index"]),
                escape(str(row.get("framework"))),
                escape(str(row.get("device"))),
                format_bytes(held) + (" peak" if row.get("framework") == "tensorflow" else " reserved"),
                format_bytes(used),
                format_bytes(gap),
                split,
            )
        out.print(ft)
    if oom:
        ot = Table(title="out-of-memory recovery", title_justify="left")
        for name in ("trial", "step", "what happened"):
            ot.add_column(name, no_wrap=name != "what happened")
        for row in oom:
            ot.add_row(
                "-" if row.get("index") is None else str(row["index"]),
                escape(str(row["kind"]).removeprefix("oom_")),
                escape(str(row["message"])),
            )
        out.print(ot)


def _print_stages(stages) -> None:  # noqa: ANN001 - StageRecords
    """Each staged trial's history: the checkpoints each worker committed, resumes, start-overs."""
    from rich.table import Table

    from trainguard.cli._display import console
    from trainguard.cli._display import markup_safe as escape
    from trainguard.units import format_bytes

    out = console(pipe_width=160)
    table = Table(title="stages of staged trials", title_justify="left")
    for name in ("#", "attempt", "worker", "event", "stage", "RSS after", "stage peak", "note"):
        table.add_column(name, justify="right" if name in ("#", "attempt", "worker", "stage") else "left")
    for st in stages:
        words = {"checkpoint": "checkpoint", "resume": "resumed from", "restart": "started over"}[st.event]
        table.add_row(
            str(st.index),
            str(st.attempt),
            "-" if st.worker_id is None else str(st.worker_id),
            words,
            str(st.stage),
            format_bytes(st.rss_bytes) if st.rss_bytes else "-",
            format_bytes(st.peak_rss_bytes) if st.peak_rss_bytes else "-",
            escape(st.note or ""),
        )
    out.print(table)


def _print_sessions(store: Any, run_id: int) -> None:
    """When a resume ran with other settings: each session's values of the settings that differ
    between sessions, and how many trials ran in it (each with its session's settings)."""
    sessions = store.session_settings(run_id)
    if len({json.dumps(s.config, sort_keys=True, default=str) for s in sessions}) < 2:
        return
    from trainguard._settings_change import setting_changes, setting_leaves, setting_name, value_words
    from trainguard.cli._display import console, when
    from trainguard.cli._display import markup_safe as escape

    differ = list(
        dict.fromkeys(
            n
            for a, b in zip(sessions, sessions[1:], strict=False)
            for n, _, _ in setting_changes(a.config, b.config)
        )
    )
    counts = store.trials_in_sessions(run_id)
    out = console()
    out.print("settings per session (each trial ran with its session's; show --json has them all):")
    for s in sessions:
        leaves = setting_leaves(s.config)
        shown = ", ".join(f"{setting_name(n, flags=False)} {value_words(n, leaves.get(n))}" for n in differ)
        out.print(
            f"  session {s.session} ({when(s.started_at)}, {counts.get(s.session, 0)} trials): {escape(shown)}"
        )
