"""The report of one run, read from the store: summary, memory per worker slot, trials, growth per
worker, events and the environment."""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from collections import defaultdict
from typing import Any

from trainguard.outcomes import ATTEMPT_WORDS, WorkerReason
from trainguard.report import _svg
from trainguard.report._axes import idle_gaps, memory_axis
from trainguard.report._flight import flight_section
from trainguard.report._html import clean, fmt_bytes, fmt_seconds, kv_table, page, text

__all__ = ["render_run", "ATTEMPT_WORDS"]

_KILL_REASONS = {r.value for r in WorkerReason if r.is_kill}
_STATUS_COLOUR = {"ok": "#7cc595", "running": "#f3d27a", "interrupted": "#c9cfd8"}
_MAX_TEXT = 400
_CHART_BUCKETS = 1800
_GROWTH_STATUSES = {"ok", "exception", "not_serializable", "framework_oom"}
_MAX_EVENTS = 5000


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


def _cause(status: str, error: dict[str, Any] | None) -> str:
    """A failed trial's cause in words: what ended it and the message it left."""
    if status in ("ok", "pending"):
        return ""
    error = error or {}
    kind = str(error.get("status") or "")
    words = ATTEMPT_WORDS.get(kind, kind.replace("_", " ")) if kind else ""
    message = str(error.get("message") or "").strip().splitlines()[0] if error.get("message") else ""
    if words and message and not message.lower().startswith(words.split(":")[0].lower()):
        return _short(f"{words}: {message}", 300)
    return _short(message or words or "failed", 300)


#: the trials table's columns of the peak model's prediction (Policy(predict_peaks=...)), beside the
#: measured peak, where the run has predictions
_PREDICTED_COLUMNS = (("predicted peak", "bytes"), ("predicted 95 %", "text"))


def _predicted_cells(prediction: dict[str, Any] | None) -> tuple[Any, str]:
    """A trial's predicted peak and its 95 % interval in words, as its latest attempt started (or
    was not started: "not run")."""
    if not prediction or prediction.get("peak_bytes") is None:
        return None, ""
    acted = {"skipped": " (not run)", "shrunk": " (started shrunk)"}.get(str(prediction.get("acted")), "")
    interval = f"{fmt_bytes(prediction.get('low_bytes'))} to {fmt_bytes(prediction.get('high_bytes'))}"
    return prediction["peak_bytes"], interval + acted


def _not_started_note(trials: list[Any], policy: dict[str, Any]) -> str:
    """A line for the trials ended ``predicted_over_limit`` (never started), where there are any."""
    skipped = [t.index for t in trials if (t.error or {}).get("status") == "predicted_over_limit"]
    if not skipped:
        return ""
    limit = policy.get("memory_limit")
    over = f" memory_limit={fmt_bytes(limit)}" if limit else " the memory limit"
    shown = ", ".join(str(i) for i in skipped[:20]) + (", …" if len(skipped) > 20 else "")
    return (
        f'<p class="note" id="not-started">{len(skipped)} trial{"s" if len(skipped) != 1 else ""} '
        f"not started (predicted over limit): the peak model put the whole 95 % interval of "
        f"{'their' if len(skipped) != 1 else 'its'} predicted peak over{text(over)}. Trials {text(shown)}.</p>"
    )


def _policy_rows(policy: dict[str, Any]) -> list[tuple[str, str]]:
    from trainguard.runner.policy import Policy

    defaults = Policy().to_dict()
    rows = []
    for key, value in policy.items():
        if key in ("memory_limit", "gpu_memory_limit", "recycle_above", "recycle_growth"):
            shown = fmt_bytes(value) if value is not None else "none"
        elif key == "timeout":
            shown = fmt_seconds(value) if value is not None else "none"
        elif isinstance(value, list):
            shown = ", ".join(str(v) for v in value)
        else:
            shown = "none" if value is None else str(value)
        if value != defaults.get(key, object()):
            shown += "  (set)"
        rows.append((key, shown))
    return rows


def _slot_of(worker: Any) -> int:
    slot = (worker.config or {}).get("slot")
    return int(slot) if isinstance(slot, int) and not isinstance(slot, bool) else int(worker.worker_id)


#: Trials of one worker the growth slope reads: Theil-Sen pairs every two points (O(n**2) memory),
#: so a 20,000-trial worker needed gigabytes; an even sample of 512 keeps each at its trial number.
GROWTH_POINTS = 512


def evenly_sampled(series: list[int], limit: int) -> tuple[list[float], list[float]]:
    """At most ``limit`` points of ``series`` spread evenly over it, the first and the last
    included, as ``(positions, values)``."""
    n = len(series)
    if n <= limit:
        return [float(i) for i in range(n)], [float(v) for v in series]
    picks = sorted({round(k * (n - 1) / (limit - 1)) for k in range(limit)})
    return [float(i) for i in picks], [float(series[i]) for i in picks]


def _growth_rows(attempts: list[Any], workers: list[Any]) -> list[dict[str, Any]]:
    """Growth of each worker's per-trial peaks: Theil-Sen slope with its 95 % interval
    (:func:`trainguard.leaks.stats.robust_slope`)."""
    from trainguard.leaks.stats import robust_slope

    peaks: dict[int, list[int]] = defaultdict(list)
    for a in sorted(attempts, key=lambda a: a.started_at):
        # a kill or a crash ends the worker with a peak that is the failure, not the growth
        if a.worker_id is not None and a.peak_rss_bytes is not None and a.status in _GROWTH_STATUSES:
            peaks[a.worker_id].append(a.peak_rss_bytes)
    out = []
    for w in workers:
        series = peaks.get(w.worker_id, [])
        row: dict[str, Any] = {
            "worker": w.worker_id,
            "slot": _slot_of(w),
            "trials": len(series),
            "first_peak": series[0] if series else None,
            "last_peak": series[-1] if series else None,
            "slope": None,
            "low": None,
            "high": None,
            "end": w.reason_text,
        }
        if len(series) >= 3:
            x, y = evenly_sampled(series, GROWTH_POINTS)
            est = robust_slope(y, x, confidence=0.95)
            row["slope"] = est.slope
            row["low"] = est.ci_low if math.isfinite(est.ci_low) else None
            row["high"] = est.ci_high if math.isfinite(est.ci_high) else None
        elif len(series) == 2:
            row["slope"] = float(series[1] - series[0])
        out.append(row)
    return out


def render_run(store: Any, info: Any, *, environment_now: dict[str, Any] | None = None) -> str:
    """The HTML of run ``info`` (a :class:`~trainguard.store.RunInfo`) read from ``store``."""
    run_id = info.run_id
    summary = store.summary(run_id)
    trials = store.trials(run_id)
    attempts = store.attempts(run_id)
    predictions = store.predictions(run_id)  # the peak model's, by trial (empty without one)
    workers = store.workers(run_id)
    events = store.events(run_id, limit=_MAX_EVENTS, kinds=None)
    # about two readings per pixel column of a chart, each stretch's highest kept: peaks survive
    samples = store.sample_envelope(run_id, buckets=_CHART_BUCKETS)
    env_events = [e for e in events if e.kind == "environment" and isinstance(e.data, dict)]
    if not env_events:
        env_events = [e for e in store.events(run_id, kinds=["environment"]) if isinstance(e.data, dict)]
    in_progress = info.status == "running"
    now = time.time()
    # samples and attempts normally follow the run's creation; a store written by another clock
    # (or a synthetic one) must not push them off the chart
    t0 = min([info.created_at] + [s.time for s in samples[:1]] + [a.started_at for a in attempts])
    t_end = max(
        [info.finished_at or 0.0, info.updated_at]
        + [s.time for s in samples[-1:]]
        + [a.finished_at or 0.0 for a in attempts]
    )
    if in_progress:
        t_end = max(t_end, min(now, info.updated_at + 5.0))
    config = info.config or {}
    policy = config.get("policy") or {}
    limit = policy.get("memory_limit")
    gpu_limit = policy.get("gpu_memory_limit")
    worker_by_id = {w.worker_id: w for w in workers}
    trial_by_index = {t.index: t for t in trials}

    # -- memory per slot ------------------------------------------------------------------------
    by_worker: dict[int, list[Any]] = defaultdict(list)
    for s in samples:
        by_worker[s.worker_id].append(s)
    slots: dict[int, list[Any]] = defaultdict(list)
    for w in workers:
        slots[_slot_of(w)].append(w)
    for wid in by_worker:
        if wid not in worker_by_id:
            slots[wid].append(None)
    rss_all = [s.rss_bytes for s in samples if s.rss_bytes > 0]
    gpu_all = [s.gpu_bytes for s in samples if s.gpu_bytes]
    peak_candidates = [p for p in [summary.peak_rss_bytes if summary else None, *rss_all, *gpu_all] if p]
    y_range, show_limit = memory_axis([float(v) for v in peak_candidates], limit)
    cuts = idle_gaps(
        [(s.time - t0, s.time - t0) for s in samples]
        + [(a.started_at - t0, (a.finished_at or t_end) - t0) for a in attempts]
        + [(0.0, 0.0), (t_end - t0, t_end - t0)]
    )

    def rel(t: float) -> float:
        return cuts.at(t - t0)

    x_range = (0.0, max(1.0, rel(t_end)))
    gap_markers = [
        _svg.VMarker(
            cuts.at(start),
            "gap",
            f"{fmt_seconds(end - start)} with no trial running and no reading (between sessions), cut from the time axis",
            symbol="⋯",
            css_class="marker gap",
        )
        for start, end in cuts.gaps
    ]
    charts = []
    recycles = kills = 0
    for slot in sorted(slots):
        slot_workers = [w for w in slots[slot] if w is not None]
        rss_segments, uss_segments, gpu_segments = [], [], []
        ids = [w.worker_id for w in slot_workers] or [slot]
        for wid in ids:
            rows = by_worker.get(wid, [])
            rss_segments.append([(rel(s.time), float(s.rss_bytes)) for s in rows if s.rss_bytes > 0])
            uss = [(rel(s.time), float(s.uss_bytes)) for s in rows if s.uss_bytes is not None]
            if uss:
                uss_segments.append(uss)
            gpu = [(rel(s.time), float(s.gpu_bytes)) for s in rows if s.gpu_bytes is not None]
            if gpu and any(v for _, v in gpu):
                gpu_segments.append(gpu)
        lines = [
            _svg.Line(
                "RSS of the worker's process tree", rss_segments, colour="#0072B2", css_class="series rss"
            )
        ]
        if uss_segments:
            lines.append(
                _svg.Line(
                    "USS (private memory)", uss_segments, colour="#56B4E9", dash="5 3", css_class="series uss"
                )
            )
        if gpu_segments:
            lines.append(
                _svg.Line("GPU memory (NVML, by pid)", gpu_segments, colour="#009E73", css_class="series gpu")
            )
        markers = list(gap_markers)
        for w in slot_workers:
            if w.ended_at is None:
                continue
            detail = w.detail or {}
            if w.reason == "recycled":
                recycles += 1
                rule = detail.get("rule")
                markers.append(
                    _svg.VMarker(
                        rel(w.ended_at),
                        "recycle",
                        f"worker {w.worker_id} {w.reason_text}" + (f" [rule: {rule}]" if rule else ""),
                        colour="#5d6b82",
                        symbol="↻",
                        css_class="marker recycle",
                    )
                )
            elif w.reason in _KILL_REASONS:
                kills += 1
                markers.append(
                    _svg.VMarker(
                        rel(w.ended_at),
                        "kill",
                        f"worker {w.worker_id} {w.reason_text}",
                        colour=_svg.RED,
                        dash=None,
                        symbol="✕",
                        css_class="marker kill",
                    )
                )
        spans = []
        wids = set(ids)
        for a in attempts:
            if a.worker_id not in wids:
                continue
            end = (
                a.finished_at
                if a.finished_at is not None
                else (t_end if a.status == "running" else a.started_at)
            )
            colour = _STATUS_COLOUR.get(a.status, "#e57373")
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
                    rel(a.started_at),
                    rel(max(end, a.started_at)),
                    colour,
                    tip,
                    label=f"trial {a.index}",
                    group=ATTEMPT_WORDS.get(a.status, a.status),
                )
            )
        hlines = []
        if limit and show_limit:
            hlines.append(_svg.HLine(float(limit), f"memory limit {fmt_bytes(limit)}"))
        if gpu_limit and gpu_segments and gpu_limit <= y_range[1]:
            hlines.append(
                _svg.HLine(float(gpu_limit), f"GPU memory limit {fmt_bytes(gpu_limit)}", colour="#00695c")
            )
        slot_peak = max((v for seg in rss_segments for _, v in seg), default=None)
        svg = _svg.line_chart(
            lines=lines,
            markers=markers,
            hlines=hlines,
            spans=spans,
            x_range=x_range,
            y_range=y_range,
            x_label="time since the run started" + (", idle gaps cut" if cuts.gaps else ""),
            title=f"memory of worker slot {slot}",
            chart_id=f"slot-{slot}",
            height=210,
        )
        worker_words = ", ".join(str(w.worker_id) for w in slot_workers) or "-"
        charts.append(
            f'<div class="slot"><h3>slot {slot} <span class="s">workers {text(worker_words)} · '
            f"{len(spans)} attempts · peak {text(fmt_bytes(slot_peak))}</span></h3>{svg}</div>"
        )

    # -- tables ---------------------------------------------------------------------------------
    attempts_by_index: dict[int, list[Any]] = defaultdict(list)
    for a in attempts:
        attempts_by_index[a.index].append(a)
    trial_rows = []
    for t in trials:
        history = " → ".join(f"{a.attempt}: {a.status}" for a in attempts_by_index.get(t.index, []))
        status = t.status
        if status == "pending" and any(a.status == "running" for a in attempts_by_index.get(t.index, [])):
            status = "running"
        trial_rows.append(
            [
                t.index,
                status,
                _cause(t.status, t.error),
                _short(t.params),
                _short(t.value) if t.status == "ok" else "",
                t.peak_rss_bytes,
                *(_predicted_cells(predictions.get(t.index)) if predictions else ()),
                t.duration_s,
                t.worker_id,
                t.attempts,
                history,
            ]
        )
    growth = _growth_rows(attempts, workers)
    growth_rows = [
        [
            g["worker"],
            g["slot"],
            g["trials"],
            g["first_peak"],
            g["last_peak"],
            g["slope"],
            g["low"],
            g["high"],
            g["end"],
        ]
        for g in growth
    ]
    event_rows = [
        [round(e.time - t0, 2), e.kind, e.worker_id, e.index, _short(e.message, 600)]
        for e in events
        if e.kind not in ("trial_stats", "environment")
    ]
    data = {
        "kind": "run",
        "run": {"name": clean(info.name), "status": info.status, "in_progress": in_progress},
        "tables": {
            "trials": {
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
                    *(_PREDICTED_COLUMNS if predictions else ()),
                    ("duration", "seconds"),
                    ("worker", "num"),
                    ("attempts", "num"),
                    ("attempt history", "text"),
                ),
                "rows": trial_rows,
            },
            "growth": {
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
                "rows": growth_rows,
            },
            "events": {
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
                "rows": event_rows,
            },
        },
    }

    # -- summary --------------------------------------------------------------------------------
    env = env_events[-1].data if env_events else environment_now or {}
    env_recorded = bool(env_events)
    ok = summary.trials_ok if summary else 0
    failed = summary.trials_failed if summary else 0
    pending = summary.trials_pending if summary else 0
    total = summary.trials_total if summary else len(trials)
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
        ("workers", str(len(workers)), f"{recycles} recycled · {kills} killed or crashed"),
    ]
    card_html = "".join(
        f'<div class="card"><div class="l">{text(c[0])}</div><div class="v">{text(c[1])}</div>'
        f'<div class="s">{text(c[2])}</div>{c[3] if len(c) > 3 else ""}</div>'
        for c in cards
    )
    frameworks = env.get("frameworks") or {}
    versions = ", ".join(f"{k} {v}" for k, v in frameworks.items() if v) or "none detected"
    what_rows = [
        ("run", info.name),
        ("function", info.fn_ref),
        ("status", info.status + (" (in progress)" if in_progress else "")),
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
        ("workers", config.get("workers", "-")),
        ("threads per worker", config.get("threads", "-")),
    ]
    for key in ("allocator", "preload", "gpus", "malloc_trim_threshold"):
        if config.get(key):
            value = config[key]
            what_rows.append((key, ", ".join(map(str, value)) if isinstance(value, list) else value))
    banner = ""
    if in_progress:
        banner = (
            '<div class="banner" id="in-progress"><b>In progress.</b> This run has not finished (or its '
            "supervisor stopped without recording an end): the report shows what was recorded up to "
            f"{text(_when(info.updated_at))}.</div>"
        )
    growth_intervals = [
        _svg.Interval(
            f"worker {g['worker']} (slot {g['slot']})",
            g["slope"],
            g["low"],
            g["high"],
            f"worker {g['worker']}: {fmt_bytes(g['slope'], signed=True) if g['slope'] is not None else '-'}/trial, "
            f"95 % interval {fmt_bytes(g['low'], signed=True)} .. {fmt_bytes(g['high'], signed=True)} over "
            f"{g['trials']} trials; {g['end']}",
            colour=_svg.PALETTE[g["slot"] % len(_svg.PALETTE)],
        )
        for g in growth
        if g["trials"] >= 2
    ]
    growth_svg = (
        _svg.interval_plot(growth_intervals, title="growth of each worker's peak RSS per trial")
        if growth_intervals
        else '<p class="muted">No worker ran two trials or more: there is no growth to estimate.</p>'
    )
    warnings = env.get("warnings") or []
    env_note = (
        f"Recorded when the run started, on {env.get('hostname') or 'its host'}."
        if env_recorded
        else "This run's store holds no environment record (written by older trainguard): this is the "
        "environment where the report was made."
    )
    env_rows = _environment_rows(env)
    warn_html = (
        '<ul class="warn">' + "".join(f"<li>{text(w)}</li>" for w in warnings) + "</ul>"
        if warnings
        else '<p class="muted">No known leaking configuration found.</p>'
    )
    status_badge = f'<span class="badge {text(_badge(info.status))}">{text(info.status)}</span>'
    legend = (
        '<div class="legend"><span><i class="l-rss"></i>RSS of the worker tree</span>'
        '<span><i class="l-uss dash"></i>USS, where sampled</span><span><i class="l-gpu"></i>GPU, where sampled</span>'
        '<span><i class="l-limit dash"></i>memory limit</span><span class="l-recycle">↻ recycle</span>'
        '<span class="l-kill-t">✕ kill or crash</span>'
        '<span><i class="box l-ok"></i>trial ok</span><span><i class="box l-failed"></i>attempt failed</span>'
        '<span><i class="box l-run"></i>running</span></div>'
    )
    body = (
        f'<header class="top"><div class="kind">trainguard run report</div><h1>{text(info.name)}{status_badge}</h1>'
        f'<div class="sub">{text(info.fn_ref)} · started {text(_when(info.created_at))} · '
        f"{text(env.get('hostname') or '')}</div></header><main>{banner}"
        f'<div class="cards">{card_html}</div>'
        f'<div class="cols"><section id="summary"><h2>What ran</h2>{kv_table(what_rows)}</section>'
        f'<section id="policy"><h2>Policy</h2><p class="note">The rules the supervisor applied; '
        f"“(set)” marks a value changed from the default.</p>{kv_table(_policy_rows(policy))}</section></div>"
        f'<section id="memory"><h2>Memory per worker slot</h2><p class="note">Each worker slot’s process tree, sampled '
        f"from outside and stored with each time bucket’s highest reading, so peaks survive downsampling. The strip "
        f"under each chart is one box per trial attempt; hover any mark for details.</p>{legend}"
        f"{''.join(charts) or '<p class=muted>No memory was sampled.</p>'}</section>"
        f"{flight_section(attempts, policy)}"
        f'<section id="trials"><h2>Trials</h2><p class="note">Click a column to sort; type to filter.</p>'
        f"{_not_started_note(trials, policy)}"
        f'<div data-table="trials"></div></section>'
        f'<section id="growth"><h2>Growth per trial, per worker</h2><p class="note">Theil-Sen slope of each worker’s '
        f"per-trial peak RSS (trials the worker survived) with its 95 % interval (trainguard’s leak statistics). A worker whose interval lies above "
        f'zero grew with every trial; recycling is what bounds it.</p>{growth_svg}<div data-table="growth"></div></section>'
        f'<section id="events"><h2>Events</h2><p class="note">Recycles (with the rule that fired), kills, retries '
        f'and run boundaries, seconds after the start.</p><div data-table="events"></div></section>'
        f'<section id="environment"><h2>Environment</h2><p class="note">{text(env_note)} From <code>trainguard doctor</code>.</p>'
        f'<div class="cols"><div>{kv_table(env_rows)}</div><div><h3>Warnings</h3>{warn_html}</div></div></section>'
        "</main>"
    )
    return page(title=f"{info.name} · trainguard report", body=body, data=data, kind="run")


def _badge(status: str) -> str:
    if status == "disk_full":
        return "stopped"  # stopped for lack of disk: resumable, as a stopped run is
    return status if status in ("completed", "failed", "running", "stopped", "interrupted") else "other"


def _environment_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
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
        rows.append(("cgroup", f"v{env['cgroup_version']}: {lim}"))
    for name, version in (env.get("frameworks") or {}).items():
        rows.append((name, version or "not installed"))
    rows.append(("Keras backend", env.get("keras_backend") or "-"))
    gpus = env.get("gpus") or []
    rows.append(
        (
            "GPUs",
            "; ".join(f"{g.get('name')} ({fmt_bytes(g.get('total_bytes'))})" for g in gpus)
            if gpus
            else ("none" if env.get("nvml_available") else "none (NVML unavailable)"),
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
