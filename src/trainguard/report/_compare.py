"""Configurations side by side: the report of a comparison (``trainguard compare ... --html``).

The input is plain JSON-ready data, so any producer can write one: either what
:meth:`trainguard.comparison.Comparison.to_dict` returns (``trainguard compare --json``; it is
converted by :func:`from_comparison`), or this shape, where every field but ``name`` is optional::

    {
      "title": "compare train.py:fit",              # the page heading
      "subtitle": "12 trials per configuration",     # one line under it
      "recommendations": ["torch backend: no growth, 1.3x slower", ...],
      "configurations": [
        {
          "name": "tensorflow · glibc · 2 threads",  # shown everywhere
          "settings": {"keras_backend": "tensorflow", "allocator": "glibc", "threads": 2},
          "status": "ok",                           # "ok", "failed" or "skipped"
          "reason": "jemalloc is not installed",    # why skipped or failed
          "trials": 12, "failed": 0,
          "growth_bytes_per_trial": 10.1e6,         # Theil-Sen slope of per-trial peaks
          "growth_ci_low_bytes_per_trial": 9.2e6,   # its 95 % interval
          "growth_ci_high_bytes_per_trial": 11.0e6,
          "peak_rss_bytes": 812e6,
          "rss_end_bytes": 790e6,                   # RSS after the last trial
          "bytes_in_use_bytes": 41e6,               # the C allocator's bytes in use then
          "seconds_per_trial": 1.6,
          "series_bytes": [601e6, 612e6, ...]       # one reading per trial, drawn on one scale
        }
      ],
      "series_label": "peak RSS of each trial"      # what series_bytes holds
    }

Numbers are bytes and seconds; a missing or non-finite number shows as "-".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from trainguard.report import _svg
from trainguard.report._html import clean, fmt_bytes, fmt_seconds, page, text

__all__ = ["render_comparison", "from_comparison"]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def from_comparison(data: dict[str, Any]) -> dict[str, Any]:
    """This module's shape from ``Comparison.to_dict()`` (the ``compare`` command's JSON)."""
    configs = []
    for r in data.get("results") or []:
        if not isinstance(r, dict):
            continue
        skipped = r.get("skipped")
        configs.append(
            {
                "name": str(r.get("label") or "?"),
                "settings": r.get("configuration") or {},
                "status": "skipped" if skipped else ("failed" if r.get("failures") else "ok"),
                "reason": skipped or r.get("words") or "",
                "trials": r.get("trials"),
                "failed": r.get("failures"),
                "growth_bytes_per_trial": r.get("growth_bytes_per_trial"),
                "growth_ci_low_bytes_per_trial": r.get("growth_ci_low_bytes_per_trial"),
                "growth_ci_high_bytes_per_trial": r.get("growth_ci_high_bytes_per_trial"),
                "peak_rss_bytes": r.get("peak_rss_bytes"),
                "rss_end_bytes": (r.get("rss_after_bytes") or [None])[-1],
                "bytes_in_use_bytes": r.get("bytes_in_use_bytes"),
                "seconds_per_trial": r.get("seconds_per_trial"),
                "series_bytes": r.get("rss_after_bytes") or [],
            }
        )
    elapsed = data.get("elapsed_s")
    subtitle = f"{data.get('trials', '?')} trials per configuration, each in a fresh worker"
    if isinstance(elapsed, (int, float)):
        subtitle += f"; {fmt_seconds(elapsed)} in all"
    if data.get("baseline"):
        subtitle += f"; baseline {data['baseline']}"
    return {
        "title": f"compare {data.get('fn') or ''}".strip(),
        "subtitle": subtitle,
        "recommendations": [data["recommendation"]] if data.get("recommendation") else [],
        "configurations": configs,
        "series_label": "RSS after each trial (read in the worker after gc.collect())",
    }


def render_comparison(comparison: dict[str, Any]) -> str:
    """HTML of a comparison (see the module docstring for the shapes).

    Raises:
        ConfigError: ``comparison`` is not a dict with a list of configurations, each with a name.
    """
    from trainguard.exceptions import ConfigError

    if isinstance(comparison, dict) and "results" in comparison and "configurations" not in comparison:
        comparison = from_comparison(comparison)

    if not isinstance(comparison, dict) or not isinstance(comparison.get("configurations"), list):
        raise ConfigError(
            "a comparison must be a dict with a 'configurations' list, e.g. {'configurations': [{'name': 'tf'}]}"
        )
    configs = comparison["configurations"]
    for i, c in enumerate(configs):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise ConfigError(f"configurations[{i}] must be a dict with a 'name' string, not {c!r:.80}")
    title = clean(comparison.get("title") or "comparison")
    setting_keys: list[str] = []
    for c in configs:
        for k in c.get("settings") or {}:
            if k not in setting_keys:
                setting_keys.append(str(k))
    columns = (
        [{"label": "configuration", "kind": "text"}, {"label": "status", "kind": "status"}]
        + [{"label": k.replace("_", " "), "kind": "text"} for k in setting_keys]
        + [
            {"label": "trials", "kind": "num"},
            {"label": "failed", "kind": "num"},
            {"label": "growth / trial", "kind": "sbytes"},
            {"label": "95 % low", "kind": "sbytes"},
            {"label": "95 % high", "kind": "sbytes"},
            {"label": "peak RSS", "kind": "bytes"},
            {"label": "RSS at end", "kind": "bytes"},
            {"label": "in use at end", "kind": "bytes"},
            {"label": "s / trial", "kind": "seconds"},
            {"label": "note", "kind": "text"},
        ]
    )
    rows = []
    for c in configs:
        settings = c.get("settings") or {}
        rows.append(
            [clean(c["name"]), clean(c.get("status") or "ok")]
            + [clean(settings.get(k)) if settings.get(k) is not None else "" for k in setting_keys]
            + [
                c.get("trials") if isinstance(c.get("trials"), int) else None,
                c.get("failed") if isinstance(c.get("failed"), int) else None,
                _num(c.get("growth_bytes_per_trial")),
                _num(c.get("growth_ci_low_bytes_per_trial")),
                _num(c.get("growth_ci_high_bytes_per_trial")),
                _num(c.get("peak_rss_bytes")),
                _num(c.get("rss_end_bytes")),
                _num(c.get("bytes_in_use_bytes")),
                _num(c.get("seconds_per_trial")),
                clean(c.get("reason") or ""),
            ]
        )
    measured = [c for c in configs if (c.get("status") or "ok") != "skipped"]
    intervals = [
        _svg.Interval(
            c["name"],
            _num(c.get("growth_bytes_per_trial")),
            _num(c.get("growth_ci_low_bytes_per_trial")),
            _num(c.get("growth_ci_high_bytes_per_trial")),
            f"{c['name']}: {fmt_bytes(_num(c.get('growth_bytes_per_trial')), signed=True)}/trial, 95 % interval "
            f"{fmt_bytes(_num(c.get('growth_ci_low_bytes_per_trial')), signed=True)} .. "
            f"{fmt_bytes(_num(c.get('growth_ci_high_bytes_per_trial')), signed=True)}",
            colour=_svg.PALETTE[i % len(_svg.PALETTE)],
        )
        for i, c in enumerate(measured)
    ]
    parts = []
    if intervals:
        parts.append(
            "<h3>Growth per trial, with its 95 % interval</h3>"
            + _svg.interval_plot(intervals, title="growth per trial by configuration")
        )
    peaks = _bars(measured, "peak_rss_bytes", lambda v: f"peak {fmt_bytes(v)}")
    if any(v is not None for _, v, _ in peaks):
        parts.append("<h3>Peak RSS</h3>" + _svg.bar_chart(peaks, title="peak RSS by configuration"))
    speed = _bars(measured, "seconds_per_trial", lambda v: f"{fmt_seconds(v)} per trial")
    if any(v is not None for _, v, _ in speed):
        parts.append(
            "<h3>Seconds per trial</h3>"
            + _svg.bar_chart(speed, unit_kind="seconds", title="seconds per trial")
        )
    lines = []
    for i, c in enumerate(measured):
        series = [_num(v) for v in c.get("series_bytes") or c.get("peaks_bytes") or []]
        pts = [(float(j + 1), v) for j, v in enumerate(series) if v is not None]
        if pts:
            lines.append(_svg.Line(c["name"], [pts], colour=_svg.PALETTE[i % len(_svg.PALETTE)], dots=True))
    if lines:
        legend = (
            '<div class="legend">'
            + "".join(
                f'<span><i class="c{i % 8}"></i>{text(line.label)}</span>' for i, line in enumerate(lines)
            )
            + "</div>"
        )
        parts.append(
            f"<h3>{text(comparison.get('series_label') or 'Peak RSS of each trial')}</h3>"
            + legend
            + _svg.line_chart(
                lines=lines,
                x_kind="count",
                x_label="trial",
                title="peak RSS per trial",
                chart_id="peaks",
                height=260,
            )
        )
    recs = [r for r in comparison.get("recommendations") or [] if r]
    rec_html = (
        '<section id="recommendations"><h2>What to use</h2><ul class="plain">'
        + "".join(f"<li>{text(r)}</li>" for r in recs)
        + "</ul></section>"
        if recs
        else ""
    )
    data = {
        "kind": "comparison",
        "tables": {"configurations": {"filter": len(rows) > 8, "columns": columns, "rows": rows}},
    }
    body = (
        f'<header class="top"><div class="kind">trainguard comparison</div><h1>{text(title)}</h1>'
        f'<div class="sub">{text(comparison.get("subtitle") or f"{len(configs)} configurations")}</div></header><main>'
        f"{rec_html}"
        f'<section id="table"><h2>Side by side</h2><p class="note">Click a column to sort.</p>'
        f'<div data-table="configurations"></div></section>'
        f'<section id="charts"><h2>Measured</h2>{"".join(parts) or "<p class=muted>Nothing was measured.</p>"}</section></main>'
    )
    return page(title=f"{title} · trainguard", body=body, data=data, kind="compare")


def _bars(
    measured: list[dict[str, Any]], key: str, describe: Callable[[float | None], str]
) -> list[tuple[str, float | None, str]]:
    """One bar per configuration: its name, its ``key`` value and the bar's tooltip."""
    return [(c["name"], _num(c.get(key)), f"{c['name']}: {describe(_num(c.get(key)))}") for c in measured]
