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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.report import _svg
from trainguard.report._html import clean, fmt_bytes, fmt_seconds, page, text

__all__ = ["render_comparison", "from_comparison", "ComparisonData", "ConfigurationRow"]


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


@dataclass(frozen=True, slots=True)
class ConfigurationRow:
    """One configuration of a comparison, its numbers finite or None."""

    name: str
    status: str
    settings: Mapping[str, Any]
    reason: str
    trials: int | None
    failed: int | None
    growth: float | None
    growth_low: float | None
    growth_high: float | None
    peak_rss_bytes: float | None
    #: RSS after the last trial, and the C allocator's bytes in use then
    rss_end_bytes: float | None
    bytes_in_use_bytes: float | None
    seconds_per_trial: float | None
    #: one reading per trial, (trial number from 1, bytes)
    series: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class ComparisonData:
    """A comparison as the report shows it (see the module docstring for the input shapes)."""

    title: str
    subtitle: str
    recommendations: tuple[str, ...]
    series_label: str
    configurations: tuple[ConfigurationRow, ...]
    #: every settings key any configuration has, in the order first seen
    setting_keys: tuple[str, ...]

    @property
    def measured(self) -> tuple[ConfigurationRow, ...]:
        """The configurations that ran (not skipped)."""
        return tuple(c for c in self.configurations if c.status != "skipped")

    @classmethod
    def from_comparison(cls, comparison: Any) -> ComparisonData:
        """Read and check a comparison in either shape.

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
        setting_keys: list[str] = []
        for c in configs:
            for k in c.get("settings") or {}:
                if k not in setting_keys:
                    setting_keys.append(str(k))
        return cls(
            title=clean(comparison.get("title") or "comparison"),
            subtitle=str(comparison.get("subtitle") or f"{len(configs)} configurations"),
            recommendations=tuple(r for r in comparison.get("recommendations") or [] if r),
            series_label=str(comparison.get("series_label") or "Peak RSS of each trial"),
            configurations=tuple(_configuration(c) for c in configs),
            setting_keys=tuple(setting_keys),
        )


def _configuration(c: dict[str, Any]) -> ConfigurationRow:
    series = [_num(v) for v in c.get("series_bytes") or c.get("peaks_bytes") or []]
    return ConfigurationRow(
        name=c["name"],
        status=str(c.get("status") or "ok"),
        settings=c.get("settings") or {},
        reason=str(c.get("reason") or ""),
        trials=c.get("trials") if isinstance(c.get("trials"), int) else None,
        failed=c.get("failed") if isinstance(c.get("failed"), int) else None,
        growth=_num(c.get("growth_bytes_per_trial")),
        growth_low=_num(c.get("growth_ci_low_bytes_per_trial")),
        growth_high=_num(c.get("growth_ci_high_bytes_per_trial")),
        peak_rss_bytes=_num(c.get("peak_rss_bytes")),
        rss_end_bytes=_num(c.get("rss_end_bytes")),
        bytes_in_use_bytes=_num(c.get("bytes_in_use_bytes")),
        seconds_per_trial=_num(c.get("seconds_per_trial")),
        series=tuple((float(j + 1), v) for j, v in enumerate(series) if v is not None),
    )


def render_comparison(data: ComparisonData) -> str:
    """HTML of a comparison."""
    columns = (
        [{"label": "configuration", "kind": "text"}, {"label": "status", "kind": "status"}]
        + [{"label": k.replace("_", " "), "kind": "text"} for k in data.setting_keys]
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
    rows: list[list[Any]] = [
        [clean(c.name), clean(c.status)]
        + [clean(c.settings.get(k)) if c.settings.get(k) is not None else "" for k in data.setting_keys]
        + [
            c.trials,
            c.failed,
            c.growth,
            c.growth_low,
            c.growth_high,
            c.peak_rss_bytes,
            c.rss_end_bytes,
            c.bytes_in_use_bytes,
            c.seconds_per_trial,
            clean(c.reason),
        ]
        for c in data.configurations
    ]
    rec_html = (
        '<section id="recommendations"><h2>What to use</h2><ul class="plain">'
        + "".join(f"<li>{text(r)}</li>" for r in data.recommendations)
        + "</ul></section>"
        if data.recommendations
        else ""
    )
    page_data = {
        "kind": "comparison",
        "tables": {"configurations": {"filter": len(rows) > 8, "columns": columns, "rows": rows}},
    }
    charts = "".join(_charts(data))
    body = (
        f'<header class="top"><div class="kind">trainguard comparison</div><h1>{text(data.title)}</h1>'
        f'<div class="sub">{text(data.subtitle)}</div></header><main>'
        f"{rec_html}"
        f'<section id="table"><h2>Side by side</h2><p class="note">Click a column to sort.</p>'
        f'<div data-table="configurations"></div></section>'
        f'<section id="charts"><h2>Measured</h2>{charts or "<p class=muted>Nothing was measured.</p>"}</section></main>'
    )
    return page(title=f"{data.title} · trainguard", body=body, data=page_data, kind="compare")


def _charts(data: ComparisonData) -> list[str]:
    """The measured configurations' growth intervals, peaks, speed and per-trial series."""
    measured = data.measured
    colour = [_svg.PALETTE[i % len(_svg.PALETTE)] for i in range(len(measured))]
    intervals = [
        _svg.Interval(
            c.name,
            c.growth,
            c.growth_low,
            c.growth_high,
            f"{c.name}: {fmt_bytes(c.growth, signed=True)}/trial, 95 % interval "
            f"{fmt_bytes(c.growth_low, signed=True)} .. {fmt_bytes(c.growth_high, signed=True)}",
            colour=colour[i],
        )
        for i, c in enumerate(measured)
    ]
    parts = []
    if intervals:
        parts.append(
            "<h3>Growth per trial, with its 95 % interval</h3>"
            + _svg.interval_plot(intervals, title="growth per trial by configuration")
        )
    peaks = [(c.name, c.peak_rss_bytes, f"{c.name}: peak {fmt_bytes(c.peak_rss_bytes)}") for c in measured]
    if any(v is not None for _, v, _ in peaks):
        parts.append("<h3>Peak RSS</h3>" + _svg.bar_chart(peaks, title="peak RSS by configuration"))
    speed = [
        (c.name, c.seconds_per_trial, f"{c.name}: {fmt_seconds(c.seconds_per_trial)} per trial")
        for c in measured
    ]
    if any(v is not None for _, v, _ in speed):
        parts.append(
            "<h3>Seconds per trial</h3>"
            + _svg.bar_chart(speed, unit_kind="seconds", title="seconds per trial")
        )
    lines = [
        _svg.Line(c.name, [list(c.series)], colour=colour[i], dots=True)
        for i, c in enumerate(measured)
        if c.series
    ]
    if lines:
        legend = (
            '<div class="legend">'
            + "".join(
                f'<span><i class="c{i % 8}"></i>{text(line.label)}</span>' for i, line in enumerate(lines)
            )
            + "</div>"
        )
        parts.append(
            f"<h3>{text(data.series_label)}</h3>"
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
    return parts
