"""The leak check report's renderer: turns a :class:`~trainguard.report._leak_data.LeakReportData`
into the page: the series with the warm-up cut, the fitted slope with its 95 % band, the verdict
and its reason, and what grows (attribution)."""

from __future__ import annotations

from typing import Any

from trainguard.report import _svg
from trainguard.report._html import clean, fmt_bytes, fmt_seconds, kv_table, page, text
from trainguard.report._leak_data import CountEvidence, LeakReportData

__all__ = ["render_leak"]


def _b(v: float | None) -> str:
    return fmt_bytes(v, signed=True) if v is not None else "-"


def render_leak(data: LeakReportData, *, title: str | None = None) -> str:
    """HTML of one leak check's report."""
    verdict, reason = data.verdict, data.reason
    rows = _attribution_rows(data)
    columns = [
        {"label": "what grows", "kind": "code"},
        {"label": "count / iteration", "kind": "num"},
        {"label": "bytes / iteration", "kind": "sbytes"},
        {"label": "detail", "kind": "text"},
    ] + [{"label": k.replace("_", " "), "kind": "text"} for k in data.extra_keys]
    tables: dict[str, Any] = {"attribution": {"filter": len(rows) > 12, "columns": columns, "rows": rows}}
    if data.counts is not None and data.counts.kinds:
        tables["counts"] = _counts_table(data.counts)
    page_data: dict[str, Any] = {"kind": "leak", "verdict": verdict, "tables": tables}
    live = (
        '<span><i class="l-live"></i>live memory: bytes in use + RSS outside glibc\'s heaps</span>'
        if data.live
        else ""
    )
    legend = (
        '<div class="legend"><span><i class="l-rss"></i>reading after gc + trim</span>'
        '<span><i class="l-untrim dash"></i>before malloc_trim</span><span><i class="box l-warm"></i>warm-up (left out)</span>'
        f'{live}<span><i class="l-fit"></i>fitted slope</span><span><i class="box l-band"></i>95 % band of the slope</span></div>'
    )
    heading = title or "leak check"
    body = (
        f'<header class="top"><div class="kind">trainguard leak check</div><h1>{text(heading)}'
        f'<span class="badge {text(verdict if verdict in ("leak", "no_leak", "plateau", "inconclusive") else "other")}">'
        f'{text(verdict)}</span></h1><div class="sub">{text(reason)}</div></header><main>'
        f'<div class="cards">{_cards(data)}</div>'
        f'<section id="series"><h2>Memory per iteration</h2><p class="note">Each reading follows gc.collect() and '
        f"malloc_trim(0). The shaded start is the warm-up, cut where the series settled; the slope and its 95 % band "
        f"are fitted to the rest.</p>{legend}{_chart(data)}</section>"
        f'<div class="cols"><section id="verdict"><h2>Verdict</h2><p class="verdict">{text(verdict)}</p>'
        f'<p class="reason">{text(reason)}</p>{kv_table(_numbers(data))}</section>'
        f'<section id="attribution"><h2>What grows</h2><p class="note">Live objects by kind (census) and, with '
        f"--tracemalloc, Python allocation sites, per iteration after the warm-up.</p>"
        + (
            '<div data-table="attribution"></div>'
            if rows
            else '<p class="muted">Nothing was found growing.</p>'
        )
        + f"{_extras(data)}</section></div></main>"
    )
    return page(title=f"{heading} · {verdict} · trainguard", body=body, data=page_data, kind="leak")


def _lines(data: LeakReportData) -> list[_svg.Line]:
    lines = [
        _svg.Line(
            f"{data.metric} after gc.collect() and malloc_trim(0)",
            [list(data.series)],
            colour="#0072B2",
            dots=len(data.series) <= 400,
            css_class="series measured",
        )
    ]
    if data.untrimmed:
        lines.insert(
            0,
            _svg.Line(
                f"{data.metric} before malloc_trim",
                [list(data.untrimmed)],
                colour="#b7c0cc",
                width=1.2,
                dash="3 3",
                css_class="series untrimmed",
            ),
        )
    if data.live:
        lines.append(
            _svg.Line(
                "live memory: bytes in use + RSS outside glibc's heaps",
                [list(data.live)],
                colour="#CC79A7",
                width=1.2,
                css_class="series live",
            )
        )
    if data.gpu:
        lines.append(_svg.Line("GPU memory", [list(data.gpu)], colour="#009E73", css_class="series gpu"))
    if data.fit is not None and data.slope is not None:
        lines.append(
            _svg.Line(
                f"fitted slope {fmt_bytes(data.slope, signed=True)}/iteration (Theil-Sen)",
                [list(data.fit)],
                colour=_svg.RED,
                width=2.0,
                css_class="series fit",
            )
        )
    return lines


def _chart(data: LeakReportData) -> str:
    if not data.series:
        return '<p class="muted">No readings were taken.</p>'
    bands = []
    if data.band is not None:
        bands.append(
            _svg.Band(
                f"95 % interval of the slope: {_b(data.ci_low)} .. {_b(data.ci_high)} per iteration",
                list(data.band),
            )
        )
    warm = data.warmup_iterations
    shades, markers = [], []
    if warm:
        shades.append(
            _svg.Span(
                min(x for x, _ in data.series),
                warm,
                "#E69F00",
                f"warm-up: the first {warm} iterations, left out of the slope",
                css_class="warmup",
            )
        )
        markers.append(
            _svg.VMarker(
                float(warm),
                "warm-up cut",
                f"end of the warm-up at iteration {warm}",
                colour="#B36B00",
                symbol="",
                css_class="marker warmup-cut",
            )
        )
    return _svg.line_chart(
        lines=_lines(data),
        bands=bands,
        markers=markers,
        shades=shades,
        x_kind="count",
        x_label="iteration",
        title=f"{data.metric} per iteration",
        chart_id="leak-series",
        height=300,
    )


def _attribution_rows(data: LeakReportData) -> list[list[Any]]:
    return [
        [
            clean(g.kind),
            round(g.count_per_iter, 2) if g.count_per_iter is not None else None,
            g.bytes_per_iter,
            clean(g.detail),
        ]
        + [clean(v) if v is not None else "" for v in g.extras]
        for g in data.attribution
    ]


def _cards(data: LeakReportData) -> str:
    d = data.fields
    cards = [
        ("growth", f"{_b(data.slope)}/iter", f"95 % interval {_b(data.ci_low)} .. {_b(data.ci_high)}"),
        (
            "iterations",
            str(d.get("iterations", "-")),
            f"{data.warmup_iterations} warm-up · {d.get('measurements', '-')} readings",
        ),
        (
            "step time",
            fmt_seconds(data.number("step_time_s")),
            f"check took {fmt_seconds(data.number('elapsed_s'))}",
        ),
        ("tolerance", f"{_b(data.number('tolerance_bytes_per_iter'))}/iter", f"metric: {data.metric}"),
    ]
    return "".join(
        f'<div class="card"><div class="l">{text(c[0])}</div><div class="v">{text(c[1])}</div><div class="s">{text(c[2])}</div></div>'
        for c in cards
    )


def _numbers(data: LeakReportData) -> list[tuple[str, Any]]:
    d = data.fields
    return [
        ("verdict", data.verdict),
        ("reason", data.reason or "-"),
        ("slope (Theil-Sen)", f"{_b(data.slope)} per iteration"),
        ("95 % interval", f"{_b(data.ci_low)} .. {_b(data.ci_high)} per iteration"),
        ("least squares", f"{_b(data.number('least_squares_bytes_per_iter'))} per iteration"),
        ("calls per reading", d.get("calls_per_measurement", "-")),
        ("fresh process", "yes" if d.get("isolated") else "no"),
    ]


def _extras(data: LeakReportData) -> str:
    """The notes under the attribution: bytes explained, count evidence, hints, GPU, the allocator,
    and the step's exception."""
    d = data.fields
    extras = ""
    if isinstance(d.get("bytes_note"), str) and d["bytes_note"]:
        extras += f'<p class="note">{text(d["bytes_note"])}</p>'
    extras += _counts_html(data.counts)
    hints = [h for h in d.get("hints") or [] if h]
    if hints:
        extras += '<h3>Hints</h3><ul class="plain">' + "".join(f"<li>{text(h)}</li>" for h in hints) + "</ul>"
    gpu_d = d.get("gpu")
    if isinstance(gpu_d, dict) and gpu_d:
        extras += f"<h3>GPU</h3><p>{text(gpu_d.get('verdict', '-'))}: {text(gpu_d.get('reason', ''))}</p>"
    retention = d.get("retention")
    if isinstance(retention, dict) and (retention.get("note") or retention.get("text")):
        extras += f"<h3>Allocator</h3><p>{text(retention.get('note') or retention.get('text'))}</p>"
    alloc = d.get("allocator")
    if isinstance(alloc, dict) and (alloc.get("text") or alloc.get("note")):
        lines = [line for line in (alloc.get("text"), alloc.get("note")) if line]
        extras += "<h3>Bytes in use (C allocator)</h3>" + "".join(f"<p>{text(line)}</p>" for line in lines)
    err = d.get("error")
    if isinstance(err, dict) and err:
        extras += (
            f"<h3>The step raised</h3><p>iteration {text(err.get('iteration', '-'))}: {text(err.get('exc_type', ''))}: "
            f"{text(err.get('message', ''))}</p><pre>{text(err.get('traceback', ''))}</pre>"
        )
    return extras


def _counts_html(counts: CountEvidence | None) -> str:
    """The count evidence (exact counts of live objects, when the leak check reports them): its
    status and note in words, and (as the "counts" table) the kinds that rose."""
    if counts is None:
        return ""
    html = f"<h3>Count evidence: {text(counts.status)}</h3>"
    if counts.note:
        html += f"<p>{text(counts.note)}</p>"
    if counts.kinds:
        html += '<div data-table="counts"></div>'
    return html


def _counts_table(counts: CountEvidence) -> dict[str, Any]:
    kinds, keys = counts.kinds, counts.keys
    return {
        "filter": False,
        "columns": [
            {
                "label": key,
                "kind": "num" if all(isinstance(k.get(key), (int, float)) for k in kinds) else "text",
            }
            for key in keys
        ],
        "rows": [
            [clean(k[key]) if isinstance(k.get(key), str) else k.get(key) for key in keys] for k in kinds
        ],
    }
