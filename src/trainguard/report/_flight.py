"""The run report's "last seconds" section: for each attempt with a flight recorder (a memory kill,
an OOM, a crash), a chart of its tree's RSS at full rate over the seconds before the end, with the
hard and soft limits, and the recorder's summary (growth rate, processes, exact peak)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainguard._flight import flight_summary
from trainguard.report import _svg
from trainguard.report._html import fmt_bytes, text

__all__ = ["flight_section"]

#: at most this many charts (the most recent attempts first): a run of many kills stays readable
_MAX_CHARTS = 12


def flight_section(attempts: list[Any], policy: dict[str, Any]) -> str:
    """The section's HTML, or "" when no attempt has a flight recorder."""
    recorded: list[tuple[Any, dict[str, Any]]] = []
    for a in attempts:
        recorder = a.error.flight_recorder if a.error is not None else None
        if isinstance(recorder, Mapping) and recorder.get("samples"):
            recorded.append((a, dict(recorder)))
    if not recorded:
        return ""
    charts = []
    for attempt, recorder in sorted(recorded, key=lambda ar: -(ar[0].started_at or 0.0))[:_MAX_CHARTS]:
        samples = recorder["samples"]
        start = float(samples[0]["t_s"])
        points = [(float(s["t_s"]) - start, float(s["rss_bytes"])) for s in samples]
        hlines = []
        if policy.get("memory_limit"):
            hlines.append(
                _svg.HLine(float(policy["memory_limit"]), f"memory limit {fmt_bytes(policy['memory_limit'])}")
            )
        if policy.get("soft_limit"):
            hlines.append(
                _svg.HLine(
                    float(policy["soft_limit"]),
                    f"soft limit {fmt_bytes(policy['soft_limit'])}",
                    colour="#ef6c00",
                )
            )
        key = f"{attempt.index}-{attempt.attempt}"
        svg = _svg.line_chart(
            lines=[_svg.Line("RSS of the worker tree", [points], css_class="series flight-rss")],
            hlines=hlines,
            x_label="seconds, up to the end of the attempt",
            title=f"trial {attempt.index} attempt {attempt.attempt}: the last seconds",
            chart_id=f"flight-{key}",
            height=170,
        )
        words = flight_summary(recorder)
        procs = ", ".join(
            f"{p.get('name')} {p.get('pid')}: {fmt_bytes(p.get('rss_bytes'))}"
            for p in (recorder.get("processes") or [])[:6]
        )
        charts.append(
            f'<div class="slot flight"><h3>trial {attempt.index} attempt {attempt.attempt} '
            f'<span class="s">{text(attempt.status)} · {text(words)}</span></h3>{svg}'
            + (f'<p class="note">processes: {text(procs)}</p>' if procs else "")
            + "</div>"
        )
    return (
        '<section id="flight"><h2>The last seconds before a kill, OOM or crash</h2><p class="note">The flight '
        "recorder: the supervisor's samples of the tree at full rate (not downsampled) over the seconds "
        f"before each such attempt ended, stored with the attempt.</p>{''.join(charts)}</section>"
    )
