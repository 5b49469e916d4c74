"""The run report's renderer: turns a :class:`~trainguard.report._data.RunReportData` (read from
the store by the data layer) into the page: summary, memory per worker slot, trials, growth per
worker, events and the environment. It reads no store and decides nothing about the data."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from trainguard.outcomes import ATTEMPT_WORDS, WorkerReason
from trainguard.report import _svg
from trainguard.report._data import KILL_REASONS, RunReportData, SlotMemory
from trainguard.report._flight import flight_section
from trainguard.report._html import clean, fmt_bytes, fmt_seconds, kv_table, page, text

__all__ = ["render_run", "ATTEMPT_WORDS"]

_STATUS_COLOUR = {"ok": "#7cc595", "running": "#f3d27a", "interrupted": "#c9cfd8"}
_MAX_TEXT = 400


def _when(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return _dt.datetime.fromtimestamp(unix_s).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _short(value: Any, width: int = _MAX_TEXT) -> str:
    if value is None:
        return ""
    s = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    s = clean(s)
    return s if len(s) <= width else s[: width - 1] + "…"


def _policy_value(key: str, value: Any) -> str:
    if key in ("memory_limit", "gpu_memory_limit", "recycle_above", "recycle_growth"):
        return fmt_bytes(value) if value is not None else "none"
    if key == "timeout":
        return fmt_seconds(value) if value is not None else "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "none" if value is None else str(value)


def _by_session(values: tuple[tuple[int, Any], ...], shown: Any) -> str:
    """``"2 GB in session 1; 3 GB in session 2"``: a setting the run's sessions ran with differently."""
    return "; ".join(f"{shown(v)} in session {n}" for n, v in values)


def _policy_rows(data: RunReportData) -> list[tuple[str, str]]:
    rows = []
    for item in data.policy_values:
        key = item.key
        if item.per_session:
            shown = _by_session(item.per_session, lambda v, k=key: _policy_value(k, v))
        else:
            shown = _policy_value(key, item.value)
        if item.changed:
            shown += "  (set)"
        rows.append((key, shown))
    return rows


def _sessions_section(data: RunReportData) -> str:
    """When a resume ran with other settings: each session, when it started, its trials, and the
    settings it changed (each trial ran with its session's)."""
    if not data.settings_differ:
        return ""
    from trainguard._settings_change import change_words, setting_changes

    ran: dict[int, list[int]] = {}
    for index, session in data.trial_sessions:
        ran.setdefault(session, []).append(index)
    rows, before = [], None
    for s in data.sessions:
        trials = ran.get(s.session, [])
        listed = ", ".join(map(str, trials[:20])) + (f" … ({len(trials)} in all)" if len(trials) > 20 else "")
        changed = change_words(setting_changes(before, s.config)) if before is not None else "as started"
        rows.append(
            (f"session {s.session}", f"{_when(s.started_at)} · trials {listed or 'none'} · {changed}")
        )
        before = s.config
    return (
        '<section id="sessions"><h2>Settings per session</h2><p class="note">The run was resumed with other '
        "settings: each trial ran with its session’s (the trials table names it).</p>"
        f"{kv_table(rows)}</section>"
    )


def render_run(data: RunReportData) -> str:
    """The HTML of one run's report."""
    info = data.info
    tables = {
        "trials": _trials_table(data),
        "growth": _growth_table(data),
        "events": _events_table(data),
    }
    page_data = {
        "kind": "run",
        "run": {"name": clean(info.name), "status": info.status, "in_progress": data.in_progress},
        "tables": tables,
    }
    env = data.environment
    status_badge = f'<span class="badge {text(_badge(info.status))}">{text(info.status)}</span>'
    body = (
        f'<header class="top"><div class="kind">trainguard run report</div><h1>{text(info.name)}{status_badge}</h1>'
        f'<div class="sub">{text(info.fn_ref)} · started {text(_when(info.created_at))} · '
        f"{text(env.get('hostname') or '')}</div></header><main>{_banner(data)}"
        f'<div class="cards">{_cards(data)}</div>'
        f'<div class="cols"><section id="summary"><h2>What ran</h2>{kv_table(_what_rows(data))}</section>'
        f'<section id="policy"><h2>Policy</h2><p class="note">The rules the supervisor applied; '
        f"“(set)” marks a value changed from the default.</p>{kv_table(_policy_rows(data))}</section></div>"
        f"{_sessions_section(data)}"
        f"{_memory_section(data)}"
        f"{flight_section(list(data.attempts), dict(data.policy))}"
        f'<section id="trials"><h2>Trials</h2><p class="note">Click a column to sort; type to filter.</p>'
        f"{_not_started_note(data)}"
        f'<div data-table="trials"></div></section>'
        f'<section id="growth"><h2>Growth per trial, per worker</h2><p class="note">Theil-Sen slope of each worker’s '
        f"per-trial peak RSS (trials the worker survived) with its 95 % interval (trainguard’s leak statistics). A worker whose interval lies above "
        f'zero grew with every trial; recycling is what bounds it.</p>{_growth_svg(data)}<div data-table="growth"></div></section>'
        f'<section id="events"><h2>Events</h2><p class="note">Recycles (with the rule that fired), kills, retries '
        f'and run boundaries, seconds after the start.</p><div data-table="events"></div></section>'
        f"{_environment_section(data)}"
        "</main>"
    )
    return page(title=f"{info.name} · trainguard report", body=body, data=page_data, kind="run")


def _memory_section(data: RunReportData) -> str:
    legend = (
        '<div class="legend"><span><i class="l-rss"></i>RSS of the worker tree</span>'
        '<span><i class="l-uss dash"></i>USS, where sampled</span><span><i class="l-gpu"></i>GPU, where sampled</span>'
        '<span><i class="l-limit dash"></i>memory limit</span><span class="l-recycle">↻ recycle</span>'
        '<span class="l-kill-t">✕ kill or crash</span>'
        '<span><i class="box l-ok"></i>trial ok</span><span><i class="box l-failed"></i>attempt failed</span>'
        '<span><i class="box l-run"></i>running</span></div>'
    )
    charts = "".join(_slot_chart(data, slot) for slot in data.slots)
    return (
        f'<section id="memory"><h2>Memory per worker slot</h2><p class="note">Each worker slot’s process tree, sampled '
        f"from outside and stored with each time bucket’s highest reading, so peaks survive downsampling. The strip "
        f"under each chart is one box per trial attempt; hover any mark for details.</p>{legend}"
        f"{charts or '<p class=muted>No memory was sampled.</p>'}</section>"
    )


def _slot_lines(slot: SlotMemory) -> list[_svg.Line]:
    lines = [
        _svg.Line("RSS of the worker's process tree", slot.rss, colour="#0072B2", css_class="series rss")
    ]
    if slot.uss:
        lines.append(
            _svg.Line("USS (private memory)", slot.uss, colour="#56B4E9", dash="5 3", css_class="series uss")
        )
    if slot.gpu:
        lines.append(
            _svg.Line("GPU memory (NVML, by pid)", slot.gpu, colour="#009E73", css_class="series gpu")
        )
    return lines


def _slot_markers(data: RunReportData, slot: SlotMemory) -> list[_svg.VMarker]:
    """The idle gaps cut from the axis, then each of the slot's workers recycled, killed or crashed."""
    markers = [
        _svg.VMarker(
            data.timeline.cuts.at(start),
            "gap",
            f"{fmt_seconds(end - start)} with no trial running and no reading (between sessions), cut from the time axis",
            symbol="⋯",
            css_class="marker gap",
        )
        for start, end in data.timeline.gaps
    ]
    for w in slot.workers:
        if w.ended_at is None:
            continue
        detail = w.detail or {}
        if w.reason == WorkerReason.RECYCLED:
            rule = detail.get("rule")
            markers.append(
                _svg.VMarker(
                    data.timeline.at(w.ended_at),
                    "recycle",
                    f"worker {w.worker_id} {w.reason_text}" + (f" [rule: {rule}]" if rule else ""),
                    colour="#5d6b82",
                    symbol="↻",
                    css_class="marker recycle",
                )
            )
        elif w.reason in KILL_REASONS:
            markers.append(
                _svg.VMarker(
                    data.timeline.at(w.ended_at),
                    "kill",
                    f"worker {w.worker_id} {w.reason_text}",
                    colour=_svg.RED,
                    dash=None,
                    symbol="✕",
                    css_class="marker kill",
                )
            )
    return markers


def _slot_spans(data: RunReportData, slot: SlotMemory) -> list[_svg.Span]:
    """One box per attempt the slot's workers ran, coloured by how it ended."""
    trial_by_index = {row.record.index: row.record for row in data.trials}
    at = data.timeline.at
    spans = []
    for a in slot.attempts:
        end = (
            a.finished_at
            if a.finished_at is not None
            else (data.timeline.t_end if a.status == "running" else a.started_at)
        )
        trial = trial_by_index.get(a.index)
        tip = (
            f"trial {a.index} attempt {a.attempt} on worker {a.worker_id}: "
            f"{ATTEMPT_WORDS.get(a.status, a.status)}; peak {fmt_bytes(a.peak_rss_bytes)}, "
            f"{fmt_seconds(a.duration_s)}"
        )
        if trial is not None:
            tip += f"; params {_short(trial.params, 120)}"
        spans.append(
            _svg.Span(
                at(a.started_at),
                at(max(end, a.started_at)),
                _STATUS_COLOUR.get(a.status, "#e57373"),
                tip,
                label=f"trial {a.index}",
                group=ATTEMPT_WORDS.get(a.status, a.status),
            )
        )
    return spans


def _slot_chart(data: RunReportData, slot: SlotMemory) -> str:
    limit, gpu_limit = data.memory_limit, data.gpu_memory_limit
    spans = _slot_spans(data, slot)
    hlines = []
    if limit and data.show_limit:
        hlines.append(_svg.HLine(float(limit), f"memory limit {fmt_bytes(limit)}"))
    if gpu_limit and slot.gpu and gpu_limit <= data.memory_range[1]:
        hlines.append(
            _svg.HLine(float(gpu_limit), f"GPU memory limit {fmt_bytes(gpu_limit)}", colour="#00695c")
        )
    svg = _svg.line_chart(
        lines=_slot_lines(slot),
        markers=_slot_markers(data, slot),
        hlines=hlines,
        spans=spans,
        x_range=data.timeline.x_range,
        y_range=data.memory_range,
        x_label="time since the run started" + (", idle gaps cut" if data.timeline.gaps else ""),
        title=f"memory of worker slot {slot.slot}",
        chart_id=f"slot-{slot.slot}",
        height=210,
    )
    worker_words = ", ".join(str(w.worker_id) for w in slot.workers) or "-"
    return (
        f'<div class="slot"><h3>slot {slot.slot} <span class="s">workers {text(worker_words)} · '
        f"{len(spans)} attempts · peak {text(fmt_bytes(slot.peak_rss_bytes))}</span></h3>{svg}</div>"
    )


#: the trials table's columns of the peak model's prediction (Policy(predict_peaks=...)), beside the
#: measured peak, where the run has predictions
_PREDICTED_COLUMNS = (("predicted peak", "bytes"), ("predicted 95 %", "text"))


def _predicted_cells(prediction: Mapping[str, Any] | None) -> tuple[Any, str]:
    """A trial's predicted peak and its 95 % interval in words, as its latest attempt started (or
    was not started: "not run")."""
    if not prediction or prediction.get("peak_bytes") is None:
        return None, ""
    acted = {"skipped": " (not run)", "shrunk": " (started shrunk)"}.get(str(prediction.get("acted")), "")
    interval = f"{fmt_bytes(prediction.get('low_bytes'))} to {fmt_bytes(prediction.get('high_bytes'))}"
    return prediction["peak_bytes"], interval + acted


def _not_started_note(data: RunReportData) -> str:
    """A line for the trials ended ``predicted_over_limit`` (never started), where there are any."""
    skipped = data.not_started
    if not skipped:
        return ""
    limit = data.memory_limit
    over = f" memory_limit={fmt_bytes(limit)}" if limit else " the memory limit"
    shown = ", ".join(str(i) for i in skipped[:20]) + (", …" if len(skipped) > 20 else "")
    return (
        f'<p class="note" id="not-started">{len(skipped)} trial{"s" if len(skipped) != 1 else ""} '
        f"not started (predicted over limit): the peak model put the whole 95 % interval of "
        f"{'their' if len(skipped) != 1 else 'its'} predicted peak over{text(over)}. Trials {text(shown)}.</p>"
    )


def _trials_table(data: RunReportData) -> dict[str, Any]:
    rows = []
    sessions = dict(data.trial_sessions)
    for row in data.trials:
        t = row.record
        rows.append(
            [
                t.index,
                row.status,
                _short(row.cause, 300),
                _short(t.params),
                _short(t.value) if t.status == "ok" else "",
                t.peak_rss_bytes,
                *(_predicted_cells(row.prediction) if data.predicted else ()),
                t.duration_s,
                t.worker_id,
                t.attempts,
                row.history,
                *((sessions.get(t.index),) if len(data.sessions) > 1 else ()),
            ]
        )
    return {
        "filter": True,
        "page": 500,
        "placeholder": "filter trials: params, cause, result, worker…",
        "columns": _columns(
            ("#", "num"),
            ("status", "status"),
            ("cause", "text"),
            ("params", "code"),
            ("result", "code"),
            ("peak RSS", "bytes"),
            *(_PREDICTED_COLUMNS if data.predicted else ()),
            ("duration", "seconds"),
            ("worker", "num"),
            ("attempts", "num"),
            ("attempt history", "text"),
            *((("session", "num"),) if len(data.sessions) > 1 else ()),
        ),
        "rows": rows,
    }


def _growth_table(data: RunReportData) -> dict[str, Any]:
    return {
        "filter": False,
        "columns": _columns(
            ("worker", "num"),
            ("slot", "num"),
            ("trials", "num"),
            ("first peak", "bytes"),
            ("last peak", "bytes"),
            ("growth / trial", "sbytes"),
            ("95 % low", "sbytes"),
            ("95 % high", "sbytes"),
            ("ended", "text"),
        ),
        "rows": [
            [g.worker, g.slot, g.trials, g.first_peak, g.last_peak, g.slope, g.low, g.high, g.end]
            for g in data.growth
        ],
    }


def _events_table(data: RunReportData) -> dict[str, Any]:
    t0 = data.timeline.t0
    return {
        "filter": True,
        "page": 300,
        "placeholder": "filter events",
        "columns": _columns(
            ("at (s)", "num"),
            ("kind", "text"),
            ("worker", "num"),
            ("trial", "num"),
            ("message", "text"),
        ),
        "rows": [
            [round(e.time - t0, 2), e.kind, e.worker_id, e.index, _short(e.message, 600)] for e in data.events
        ],
    }


def _cards(data: RunReportData) -> str:
    summary, limit = data.summary, data.memory_limit
    ok = summary.trials_ok if summary else 0
    failed = summary.trials_failed if summary else 0
    pending = summary.trials_pending if summary else 0
    total = summary.trials_total if summary else len(data.trials)
    peak = summary.peak_rss_bytes if summary else None
    wall = summary.duration_s if summary else None
    meter = ""
    peak_sub = "no limit set"
    if limit and peak:
        frac = peak / limit
        pct = min(100.0, frac * 100)
        meter = (
            '<svg class="meter" viewBox="0 0 100 6" preserveAspectRatio="none" role="img" '
            f'aria-label="{pct:.0f} % of the limit"><rect width="100" height="6" rx="3" fill="#e8edf5"/>'
            f'<rect width="{pct:.1f}" height="6" rx="3" fill="{_svg.RED if frac >= 0.9 else "#0072B2"}"/></svg>'
        )
        peak_sub = f"{frac * 100:.0f} % of the limit {fmt_bytes(limit)}"
    cards = [
        (
            "trials",
            f"{ok} ok · {failed} failed",
            f"{total} in all" + (f", {pending} pending" if pending else ""),
        ),
        (
            "wall time",
            fmt_seconds(wall),
            f"{summary.sessions} sessions" if summary and summary.sessions > 1 else "one session",
        ),
        ("peak RSS", fmt_bytes(peak), peak_sub, meter),
        ("workers", str(len(data.workers)), f"{_recycled_words(data)} · {data.kills} killed or crashed"),
    ]
    return "".join(
        f'<div class="card"><div class="l">{text(c[0])}</div><div class="v">{text(c[1])}</div>'
        f'<div class="s">{text(c[2])}</div>{c[3] if len(c) > 3 else ""}</div>'
        for c in cards
    )


def _recycled_words(data: RunReportData) -> str:
    """``"3 recycled (2 for retention, 1 for a leak)"``: the causes the policy named, where it did."""
    parts = [f"{n} for {word}" for word, n in data.recycle_causes]
    return f"{data.recycles} recycled" + (f" ({', '.join(parts)})" if parts else "")


def _what_rows(data: RunReportData) -> list[tuple[str, Any]]:
    info, env, config = data.info, data.environment, data.config
    frameworks = env.get("frameworks") or {}
    versions = ", ".join(f"{k} {v}" for k, v in frameworks.items() if v) or "none detected"
    rows: list[tuple[str, Any]] = [
        ("run", info.name),
        ("function", info.fn_ref),
        ("status", info.status + (" (in progress)" if data.in_progress else "")),
        ("started", _when(info.created_at)),
        ("finished", _when(info.finished_at) if info.finished_at else "not yet"),
        ("host", env.get("hostname") or "-"),
        ("trainguard", env.get("trainguard") or "-"),
        ("Python", env.get("python") or "-"),
        ("frameworks", versions),
        (
            "Keras backend",
            config.get("keras_backend")
            or (f"not set ({env['keras_backend']} by default)" if env.get("keras_backend") else "-"),
        ),
        ("workers", _session_setting(data, "workers")),
        ("threads per worker", _session_setting(data, "threads")),
    ]
    for key in ("allocator", "preload", "gpus", "malloc_trim_threshold"):
        if config.get(key):
            value = config[key]
            rows.append((key, ", ".join(map(str, value)) if isinstance(value, list) else value))
    return rows


def _session_setting(data: RunReportData, key: str) -> Any:
    """A run setting: its value, or each session's where a resume changed it."""
    from trainguard.report._data import per_session

    values = per_session(data.sessions, (key,))
    return _by_session(values, str) if values else data.config.get(key, "-")


def _banner(data: RunReportData) -> str:
    if not data.in_progress:
        return ""
    return (
        '<div class="banner" id="in-progress"><b>In progress.</b> This run has not finished (or its '
        "supervisor stopped without recording an end): the report shows what was recorded up to "
        f"{text(_when(data.info.updated_at))}.</div>"
    )


def _growth_svg(data: RunReportData) -> str:
    intervals = [
        _svg.Interval(
            f"worker {g.worker} (slot {g.slot})",
            g.slope,
            g.low,
            g.high,
            f"worker {g.worker}: {fmt_bytes(g.slope, signed=True) if g.slope is not None else '-'}/trial, "
            f"95 % interval {fmt_bytes(g.low, signed=True)} .. {fmt_bytes(g.high, signed=True)} over "
            f"{g.trials} trials; {g.end}",
            colour=_svg.PALETTE[g.slot % len(_svg.PALETTE)],
        )
        for g in data.growth
        if g.trials >= 2
    ]
    if not intervals:
        return '<p class="muted">No worker ran two trials or more: there is no growth to estimate.</p>'
    return _svg.interval_plot(intervals, title="growth of each worker's peak RSS per trial")


def _environment_section(data: RunReportData) -> str:
    env = data.environment
    warnings = env.get("warnings") or []
    env_note = (
        f"Recorded when the run started, on {env.get('hostname') or 'its host'}."
        if data.environment_recorded
        else "This run's store holds no environment record (written by older trainguard): this is the "
        "environment where the report was made."
    )
    warn_html = (
        '<ul class="warn">' + "".join(f"<li>{text(w)}</li>" for w in warnings) + "</ul>"
        if warnings
        else '<p class="muted">No known leaking configuration found.</p>'
    )
    return (
        f'<section id="environment"><h2>Environment</h2><p class="note">{text(env_note)} From <code>trainguard doctor</code>.</p>'
        f'<div class="cols"><div>{kv_table(_environment_rows(env))}</div><div><h3>Warnings</h3>{warn_html}</div></div></section>'
    )


def _badge(status: str) -> str:
    if status == "disk_full":
        return "stopped"  # stopped for lack of disk: resumable, as a stopped run is
    return status if status in ("completed", "failed", "running", "stopped", "interrupted") else "other"


def _environment_rows(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    if not env:
        return [("environment", "not recorded")]
    rows: list[tuple[str, str]] = []
    if env.get("hostname"):
        rows.append(("host", env["hostname"]))
    rows.append(("Python", f"{env.get('python', '-')} ({env.get('python_executable', '-')})"))
    rows.append(("OS", env.get("os", "-")))
    quota = f", quota {env['cpu_quota']:g}" if env.get("cpu_quota") else ""
    rows.append(("CPUs", f"{env.get('cpus', '-')} ({env.get('cpus_usable', '-')} usable{quota})"))
    rows.append(
        (
            "memory",
            f"{fmt_bytes(env.get('memory_total_bytes'))} total, {fmt_bytes(env.get('memory_available_bytes'))} "
            f"available, swap {fmt_bytes(env.get('swap_total_bytes'))}",
        )
    )
    if env.get("cgroup_version") is not None:
        lim = fmt_bytes(env.get("cgroup_limit_bytes")) if env.get("cgroup_limit_bytes") else "no limit"
        layout = f"; {env['cgroup_layout']} layout" if env.get("cgroup_layout") else ""
        rows.append(("cgroup", f"memory: v{env['cgroup_version']} controller, {lim}{layout}"))
    for name, version in (env.get("frameworks") or {}).items():
        rows.append((name, version or "not installed"))
    rows.append(("Keras backend", env.get("keras_backend") or "-"))
    gpus = env.get("gpus") or []
    rows.append(
        (
            "GPUs",
            "; ".join(f"{g.get('name')} ({fmt_bytes(g.get('total_bytes'))})" for g in gpus)
            if gpus
            else (
                "none"
                if env.get("nvml_available")
                else f"none seen: {env['nvml_absence']}"
                if env.get("nvml_absence")
                else "none (NVML unavailable)"
            ),
        )
    )
    rows.append(("allocator", env.get("allocator", "-")))
    threads = ", ".join(f"{k}={v}" for k, v in (env.get("threads") or {}).items() if v) or "none set"
    rows.append(("thread variables", threads))
    memenv = ", ".join(f"{k}={v}" for k, v in (env.get("environment") or {}).items() if v) or "none set"
    rows.append(("memory variables", memenv))
    return rows


def _columns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    """A table's columns for the page's script: (label, kind) pairs, kind one of the script's
    formats (num, text, code, bytes, sbytes, seconds, status)."""
    return [{"label": label, "kind": kind} for label, kind in pairs]
