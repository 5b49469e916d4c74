"""The report of one leak check: the series with the warm-up cut, the fitted slope with its 95 %
band, the verdict and its reason, and what grows (attribution)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from trainguard.report import _svg
from trainguard.report._html import clean, fmt_bytes, fmt_seconds, kv_table, page, text

__all__ = ["render_leak"]

_KNOWN_GROWTH_KEYS = ("kind", "count_per_iter", "bytes_per_iter", "detail", "text")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def render_leak(report: Any, *, title: str | None = None) -> str:
    """HTML of a :class:`~trainguard.leaks.LeakReport` (or its ``to_dict()``)."""
    d = report if isinstance(report, dict) else report.to_dict()
    verdict = str(d.get("verdict") or "inconclusive")
    series = [r for r in d.get("series") or [] if isinstance(r, dict) and _num(r.get("bytes")) is not None]
    warm = int(d.get("warmup_iterations") or 0)
    slope = _num(d.get("slope_bytes_per_iter"))
    lo = _num(d.get("ci_low_bytes_per_iter"))
    hi = _num(d.get("ci_high_bytes_per_iter"))
    metric = str(d.get("metric") or "memory")

    xs = [float(r["iteration"]) for r in series]
    ys = [float(r["bytes"]) for r in series]
    lines = [
        _svg.Line(
            f"{metric} after gc.collect() and malloc_trim(0)",
            [list(zip(xs, ys, strict=False))],
            colour="#0072B2",
            dots=len(series) <= 400,
            css_class="series measured",
        )
    ]
    untrimmed = [
        (float(r["iteration"]), float(r["untrimmed_bytes"])) for r in series if _num(r.get("untrimmed_bytes"))
    ]
    if untrimmed and any(abs(u - y) > 0 for (_, u), y in zip(untrimmed, ys, strict=False)):
        lines.insert(
            0,
            _svg.Line(
                f"{metric} before malloc_trim",
                [untrimmed],
                colour="#b7c0cc",
                width=1.2,
                dash="3 3",
                css_class="series untrimmed",
            ),
        )
    gpu = [(float(r["iteration"]), float(r["gpu_bytes"])) for r in series if _num(r.get("gpu_bytes"))]
    if gpu:
        lines.append(_svg.Line("GPU memory", [gpu], colour="#009E73", css_class="series gpu"))
    bands: list[_svg.Band] = []
    kept = [(x, y) for x, y in zip(xs, ys, strict=False) if x >= warm]
    if slope is not None and len(kept) >= 2:
        kx = [k[0] for k in kept]
        ky = [k[1] for k in kept]
        intercept = statistics.median(y - slope * x for x, y in kept)
        x0, x1 = kx[0], kx[-1]
        xc = sum(kx) / len(kx)
        yc = intercept + slope * xc
        lines.append(
            _svg.Line(
                f"fitted slope {fmt_bytes(slope, signed=True)}/iteration (Theil-Sen)",
                [[(x0, intercept + slope * x0), (x1, intercept + slope * x1)]],
                colour=_svg.RED,
                width=2.0,
                css_class="series fit",
            )
        )
        if lo is not None and hi is not None:
            bands.append(
                _svg.Band(
                    f"95 % interval of the slope: {fmt_bytes(lo, signed=True)} .. {fmt_bytes(hi, signed=True)} per iteration",
                    [
                        (x0, yc + lo * (x0 - xc)),
                        (x1, yc + lo * (x1 - xc)),
                        (x1, yc + hi * (x1 - xc)),
                        (x0, yc + hi * (x0 - xc)),
                    ],
                )
            )
        del ky
    shades = []
    markers = []
    if warm and xs:
        shades.append(
            _svg.Span(
                min(xs),
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
    chart = (
        _svg.line_chart(
            lines=lines,
            bands=bands,
            markers=markers,
            shades=shades,
            x_kind="count",
            x_label="iteration",
            title=f"{metric} per iteration",
            chart_id="leak-series",
            height=300,
        )
        if series
        else '<p class="muted">No readings were taken.</p>'
    )

    growth = [g for g in d.get("growth_by_kind") or [] if isinstance(g, dict)]
    extra_keys: list[str] = []
    for g in growth:
        for k, v in g.items():
            if (
                k not in _KNOWN_GROWTH_KEYS
                and k not in extra_keys
                and (v is None or isinstance(v, (str, int, float)))
            ):
                extra_keys.append(k)
    columns = [
        {"label": "what grows", "kind": "code"},
        {"label": "count / iteration", "kind": "num"},
        {"label": "bytes / iteration", "kind": "sbytes"},
        {"label": "detail", "kind": "text"},
    ] + [{"label": k.replace("_", " "), "kind": "text"} for k in extra_keys]
    rows = []
    for g in growth:
        count = _num(g.get("count_per_iter"))
        rows.append(
            [
                clean(g.get("kind", "")),
                round(count, 2) if count is not None else None,
                _num(g.get("bytes_per_iter")),
                clean(g.get("detail") or ""),
            ]
            + [clean(g.get(k)) if g.get(k) is not None else "" for k in extra_keys]
        )
    data: dict[str, Any] = {
        "kind": "leak",
        "verdict": verdict,
        "tables": {"attribution": {"filter": len(rows) > 12, "columns": columns, "rows": rows}},
    }
    counts_html = _counts_section(d.get("counts"), data["tables"])

    def b(v: float | None) -> str:
        return fmt_bytes(v, signed=True) if v is not None else "-"

    cards = [
        ("growth", f"{b(slope)}/iter", f"95 % interval {b(lo)} .. {b(hi)}"),
        (
            "iterations",
            str(d.get("iterations", "-")),
            f"{warm} warm-up · {d.get('measurements', '-')} readings",
        ),
        (
            "step time",
            fmt_seconds(_num(d.get("step_time_s"))),
            f"check took {fmt_seconds(_num(d.get('elapsed_s')))}",
        ),
        ("tolerance", f"{b(_num(d.get('tolerance_bytes_per_iter')))}/iter", f"metric: {metric}"),
    ]
    card_html = "".join(
        f'<div class="card"><div class="l">{text(c[0])}</div><div class="v">{text(c[1])}</div><div class="s">{text(c[2])}</div></div>'
        for c in cards
    )
    numbers = [
        ("verdict", verdict),
        ("reason", d.get("reason") or "-"),
        ("slope (Theil-Sen)", f"{b(slope)} per iteration"),
        ("95 % interval", f"{b(lo)} .. {b(hi)} per iteration"),
        ("least squares", f"{b(_num(d.get('least_squares_bytes_per_iter')))} per iteration"),
        ("calls per reading", d.get("calls_per_measurement", "-")),
        ("fresh process", "yes" if d.get("isolated") else "no"),
    ]
    extras = ""
    if isinstance(d.get("bytes_note"), str) and d["bytes_note"]:
        extras += f'<p class="note">{text(d["bytes_note"])}</p>'
    extras += counts_html
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
    legend = (
        '<div class="legend"><span><i class="l-rss"></i>reading after gc + trim</span>'
        '<span><i class="l-untrim dash"></i>before malloc_trim</span><span><i class="box l-warm"></i>warm-up (left out)</span>'
        '<span><i class="l-fit"></i>fitted slope</span><span><i class="box l-band"></i>95 % band of the slope</span></div>'
    )
    heading = title or "leak check"
    body = (
        f'<header class="top"><div class="kind">trainguard leak check</div><h1>{text(heading)}'
        f'<span class="badge {text(verdict if verdict in ("leak", "no_leak", "plateau", "inconclusive") else "other")}">'
        f'{text(verdict)}</span></h1><div class="sub">{text(d.get("reason") or "")}</div></header><main>'
        f'<div class="cards">{card_html}</div>'
        f'<section id="series"><h2>Memory per iteration</h2><p class="note">Each reading follows gc.collect() and '
        f"malloc_trim(0). The shaded start is the warm-up, cut where the series settled; the slope and its 95 % band "
        f"are fitted to the rest.</p>{legend}{chart}</section>"
        f'<div class="cols"><section id="verdict"><h2>Verdict</h2><p class="verdict">{text(verdict)}</p>'
        f'<p class="reason">{text(d.get("reason") or "")}</p>{kv_table(numbers)}</section>'
        f'<section id="attribution"><h2>What grows</h2><p class="note">Live objects by kind (census) and, with '
        f"--tracemalloc, Python allocation sites, per iteration after the warm-up.</p>"
        + (
            '<div data-table="attribution"></div>'
            if rows
            else '<p class="muted">Nothing was found growing.</p>'
        )
        + f"{extras}</section></div></main>"
    )
    return page(title=f"{heading} · {verdict} · trainguard", body=body, data=data, kind="leak")


def _flat(item: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar fields of ``item``, nested dicts one level down as ``outer inner``."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        label = f"{prefix}{key}".replace("_", " ")
        if isinstance(value, dict) and not prefix:
            out.update(_flat(value, prefix=f"{key} "))
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[label] = value
    return out


def _counts_section(counts: Any, tables: dict[str, Any]) -> str:
    """The count evidence (exact counts of live objects, when the leak check reports them): its
    status and note in words, and the kinds that rose as a table of their scalar fields."""
    if not isinstance(counts, dict) or not counts:
        return ""
    html = f"<h3>Count evidence: {text(counts.get('status', '-'))}</h3>"
    if counts.get("note"):
        html += f"<p>{text(counts['note'])}</p>"
    kinds = [_flat(k) for k in counts.get("kinds") or [] if isinstance(k, dict)]
    if kinds:
        keys: list[str] = []
        for k in kinds:
            keys.extend(key for key in k if key not in keys)
        tables["counts"] = {
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
        html += '<div data-table="counts"></div>'
    return html
