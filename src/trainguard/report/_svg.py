"""Charts as inline SVG text, drawn by this module: a line chart over time or iterations, an interval
(forest) plot and horizontal bars. No dependency, no script: a report's pictures show even where
scripts are off. Every piece of text goes through :func:`trainguard.report._html.text`.

Downsampling keeps extremes: a series longer than the chart is wide is reduced to the lowest and
the highest value of each pixel column (in the order they occurred), so a peak is never averaged
away and the drawn line never has more than two points per column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainguard.report._html import text

__all__ = [
    "Line",
    "Band",
    "VMarker",
    "HLine",
    "Span",
    "line_chart",
    "interval_plot",
    "bar_chart",
    "minmax_downsample",
    "nice_ticks",
    "format_seconds",
    "format_axis_bytes",
]

#: The palette: colour-blind-safe (Okabe-Ito), one per worker slot or configuration.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
RED = "#C62828"
GREY = "#8A94A6"


@dataclass(frozen=True, slots=True)
class Line:
    """One drawn series. ``segments`` are lists of (x, y) drawn as separate strokes (gaps between)."""

    label: str
    segments: Sequence[Sequence[tuple[float, float]]]
    colour: str = PALETTE[0]
    width: float = 1.6
    dash: str | None = None
    dots: bool = False
    css_class: str = "series"


@dataclass(frozen=True, slots=True)
class Band:
    """A filled polygon (e.g. a confidence band), given as its outline points."""

    label: str
    points: Sequence[tuple[float, float]]
    colour: str = RED
    opacity: float = 0.15


@dataclass(frozen=True, slots=True)
class VMarker:
    """A vertical marker at ``x`` (a recycle, a kill, the end of a warm-up) with a hover text."""

    x: float
    label: str
    tooltip: str
    colour: str = GREY
    dash: str | None = "4 3"
    symbol: str = ""
    css_class: str = "marker"


@dataclass(frozen=True, slots=True)
class HLine:
    """A horizontal rule at ``y`` (a memory limit) with a label at its right end."""

    y: float
    label: str
    colour: str = RED
    dash: str | None = "6 4"


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of the x axis drawn as a strip under the plot (one trial's attempt) or a shade.

    ``label`` names it briefly ("trial 12") and ``group`` says what it was ("ok"): neighbours of the
    same group closer than a pixel are drawn as one box, so 10,000 trials stay a small file."""

    x0: float
    x1: float
    colour: str
    tooltip: str
    css_class: str = "trial"
    label: str = ""
    group: str = ""


def _merge_spans(spans: Sequence[Span], px) -> list[Span]:  # noqa: ANN001 - px: float -> float
    out: list[Span] = []
    run: list[Span] = []

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            out.append(run[0])
        else:
            first, last = run[0], run[-1]
            out.append(
                Span(
                    first.x0,
                    max(s.x1 for s in run),
                    first.colour,
                    f"{len(run)} attempts, {first.label} to {last.label}: {first.group}",
                    first.css_class,
                    first.label,
                    first.group,
                )
            )
        run.clear()

    for s in sorted(spans, key=lambda s: s.x0):
        if run and (
            s.group != run[-1].group
            or not s.group
            or px(s.x1) - px(run[0].x0) > 6.0  # merged boxes stay under 6 px wide
        ):
            flush()
        run.append(s)
    flush()
    return out


@dataclass(slots=True)
class _Frame:
    width: int
    height: int
    left: int = 64
    right: int = 16
    top: int = 14
    bottom: int = 34
    x_min: float = 0.0
    x_max: float = 1.0
    y_min: float = 0.0
    y_max: float = 1.0
    parts: list[str] = field(default_factory=list)

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    def px(self, x: float) -> float:
        span = self.x_max - self.x_min or 1.0
        return self.left + (x - self.x_min) / span * self.plot_w

    def py(self, y: float) -> float:
        span = self.y_max - self.y_min or 1.0
        return self.top + (1.0 - (y - self.y_min) / span) * self.plot_h


def _n(v: float) -> str:
    """A coordinate with one decimal, no trailing zeros: keeps the SVG small."""
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _dash_attr(dash: str | None) -> str:
    """The ``stroke-dasharray`` attribute of a dashed stroke (with its leading space), ``""`` if solid."""
    return f' stroke-dasharray="{dash}"' if dash else ""


def minmax_downsample(
    points: Sequence[tuple[float, float]], x_min: float, x_max: float, columns: int
) -> list[tuple[float, float]]:
    """Reduce ``points`` (sorted by x) to at most two per column: each column's lowest and highest y,
    in the order they occurred. The highest value of the whole series is always kept."""
    if columns <= 0 or len(points) <= 2:
        return list(points)
    span = (x_max - x_min) or 1.0
    first = int((points[0][0] - x_min) / span * columns)
    last = int((points[-1][0] - x_min) / span * columns)
    if len(points) <= 2 * (last - first + 1):  # already at most two points per column it covers
        return list(points)
    out: list[tuple[float, float]] = []
    current: int | None = None
    lo = hi = (0.0, 0.0)
    for x, y in points:
        col = min(columns - 1, max(0, int((x - x_min) / span * columns)))
        if col != current:
            if current is not None:
                out.extend(sorted({lo, hi}, key=lambda p: p[0]))
            current, lo, hi = col, (x, y), (x, y)
            continue
        if y < lo[1]:
            lo = (x, y)
        if y > hi[1]:
            hi = (x, y)
    if current is not None:
        out.extend(sorted({lo, hi}, key=lambda p: p[0]))
    return out


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


_KIB = 1024.0


def _byte_unit(span: float) -> tuple[float, str]:
    for factor, unit in ((_KIB**3, "GiB"), (_KIB**2, "MiB"), (_KIB, "KiB")):
        if span >= factor:
            return factor, unit
    return 1.0, "B"


def format_axis_bytes(value: float, factor: float, unit: str) -> str:
    v = value / factor
    return f"{v:,.{0 if abs(v) >= 100 or v == int(v) else 1}f} {unit}"


def format_seconds(seconds: float) -> str:
    """Elapsed time as ``'45s'``, ``'12:05'`` (m:ss) or ``'1:02:05'`` (h:mm:ss)."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f}s"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def format_seconds_short(seconds: float) -> str:
    """A duration with its unit: ``'450 µs'``, ``'12 ms'``, ``'1.21 s'``, ``'2:05'``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    return format_seconds(seconds)


def _time_ticks(lo: float, hi: float) -> list[float]:
    span = hi - lo
    steps = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)
    step = next((s for s in steps if span / s <= 7), steps[-1])
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def line_chart(
    *,
    lines: Sequence[Line],
    width: int = 960,
    height: int = 240,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    x_kind: str = "seconds",
    y_kind: str = "bytes",
    x_label: str = "",
    bands: Sequence[Band] = (),
    markers: Sequence[VMarker] = (),
    hlines: Sequence[HLine] = (),
    spans: Sequence[Span] = (),
    shades: Sequence[Span] = (),
    title: str = "",
    chart_id: str = "",
) -> str:
    """An SVG line chart. ``x_kind`` is ``"seconds"`` (elapsed time axis) or ``"count"``; ``y_kind``
    ``"bytes"`` (binary units) or ``"number"``. ``spans`` are drawn as a strip under the plot (trials),
    ``shades`` as light backgrounds inside it (a warm-up)."""
    strip = 12 if spans else 0
    frame = _Frame(width=width, height=height + strip, bottom=34 + strip)
    _fit_frame(frame, lines, bands, markers, hlines, spans, x_range, y_range)
    p = frame.parts
    label = f' aria-label="{text(title)}"' if title else ""
    ident = f' id="{text(chart_id)}"' if chart_id else ""
    p.append(
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.width} {frame.height}"'
        f' role="img"{ident}{label} preserveAspectRatio="xMinYMin meet" data-y-min="{frame.y_min:.6g}"'
        f' data-y-max="{frame.y_max:.6g}" data-plot-top="{frame.top}" data-plot-height="{_n(frame.plot_h)}">'
    )
    if title:
        p.append(f"<title>{text(title)}</title>")
    _grid(frame, x_kind, y_kind, x_label, strip)
    _draw_shades(frame, shades)
    _draw_bands(frame, bands)
    _draw_lines(frame, lines)
    _draw_hlines(frame, hlines)
    _draw_markers(frame, markers)
    _draw_spans(frame, spans)
    p.append("</svg>")
    return "".join(p)


def _fit_frame(
    frame: _Frame,
    lines: Sequence[Line],
    bands: Sequence[Band],
    markers: Sequence[VMarker],
    hlines: Sequence[HLine],
    spans: Sequence[Span],
    x_range: tuple[float, float] | None,
    y_range: tuple[float, float] | None,
) -> None:
    """The frame's ranges: those given, else what is drawn (y padded by 6 %, never below 0 for
    readings that are not)."""
    xs = [x for line in lines for seg in line.segments for x, _ in seg]
    xs += [m.x for m in markers] + [s.x1 for s in spans] + [s.x0 for s in spans]
    ys = [y for line in lines for seg in line.segments for _, y in seg]
    ys += [h.y for h in hlines] + [y for band in bands for _, y in band.points]
    if x_range is not None:
        frame.x_min, frame.x_max = x_range
    elif xs:
        frame.x_min, frame.x_max = min(xs), max(xs)
    if frame.x_max <= frame.x_min:
        frame.x_max = frame.x_min + 1.0
    if y_range is not None:
        frame.y_min, frame.y_max = y_range
    elif ys:
        lo, hi = min(ys), max(ys)
        pad = (hi - lo) * 0.06 or abs(hi) * 0.05 or 1.0
        frame.y_min = max(0.0, lo - pad) if lo >= 0 else lo - pad
        frame.y_max = hi + pad
    if frame.y_max <= frame.y_min:
        frame.y_max = frame.y_min + 1.0


def _draw_shades(frame: _Frame, shades: Sequence[Span]) -> None:
    for shade in shades:
        x0, x1 = frame.px(max(shade.x0, frame.x_min)), frame.px(min(shade.x1, frame.x_max))
        frame.parts.append(
            f'<rect class="{shade.css_class}" x="{_n(x0)}" y="{frame.top}" width="{_n(max(0.0, x1 - x0))}"'
            f' height="{_n(frame.plot_h)}" fill="{shade.colour}" fill-opacity="0.12">'
            f"<title>{text(shade.tooltip)}</title></rect>"
        )


def _draw_bands(frame: _Frame, bands: Sequence[Band]) -> None:
    for band in bands:
        pts = " ".join(f"{_n(frame.px(x))},{_n(frame.py(y))}" for x, y in band.points)
        frame.parts.append(
            f'<polygon class="band" points="{pts}" fill="{band.colour}" fill-opacity="{band.opacity}"'
            f' stroke="none"><title>{text(band.label)}</title></polygon>'
        )


def _draw_lines(frame: _Frame, lines: Sequence[Line]) -> None:
    """Each line as one path of its segments (each downsampled to two points a pixel column), with
    its dots where asked."""
    columns = int(frame.plot_w)
    for line in lines:
        d_parts = []
        dots = []
        for seg in line.segments:
            seg = minmax_downsample(seg, frame.x_min, frame.x_max, columns)
            if not seg:
                continue
            coords = [(frame.px(x), frame.py(y)) for x, y in seg]
            d_parts.append("M" + " L".join(f"{_n(a)} {_n(b)}" for a, b in coords))
            if line.dots:
                dots.extend(coords)
        if not d_parts:
            continue
        frame.parts.append(
            f'<path class="{line.css_class}" d="{" ".join(d_parts)}" fill="none" stroke="{line.colour}"'
            f' stroke-width="{line.width}" stroke-linejoin="round"{_dash_attr(line.dash)}><title>{text(line.label)}</title></path>'
        )
        if dots:
            frame.parts.append(
                f'<g class="dots" fill="{line.colour}">'
                + "".join(f'<circle cx="{_n(a)}" cy="{_n(b)}" r="2"/>' for a, b in dots)
                + "</g>"
            )


def _draw_hlines(frame: _Frame, hlines: Sequence[HLine]) -> None:
    for h in hlines:
        if not frame.y_min <= h.y <= frame.y_max:
            continue
        y = frame.py(h.y)
        frame.parts.append(
            f'<g class="limit"><line x1="{frame.left}" x2="{_n(frame.left + frame.plot_w)}" y1="{_n(y)}" y2="{_n(y)}"'
            f' stroke="{h.colour}" stroke-width="1.4"{_dash_attr(h.dash)}/>'
            f'<text x="{_n(frame.left + frame.plot_w - 4)}" y="{_n(y + 13 if y < frame.top + 20 else y - 4)}" text-anchor="end" fill="{h.colour}"'
            f' class="lbl">{text(h.label)}</text></g>'
        )


def _draw_markers(frame: _Frame, markers: Sequence[VMarker]) -> None:
    for m in markers:
        if not frame.x_min <= m.x <= frame.x_max:
            continue
        x = frame.px(m.x)
        sym = (
            f'<text x="{_n(x)}" y="{frame.top + 11}" text-anchor="middle" fill="{m.colour}" class="sym">'
            f"{text(m.symbol)}</text>"
            if m.symbol
            else ""
        )
        frame.parts.append(
            f'<g class="{m.css_class}"><title>{text(m.tooltip)}</title>'
            f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{frame.top}" y2="{_n(frame.top + frame.plot_h)}"'
            f' stroke="{m.colour}" stroke-width="1.3"{_dash_attr(m.dash)}/>{sym}'
            f'<rect x="{_n(x - 4)}" y="{frame.top}" width="8" height="{_n(frame.plot_h)}" fill="transparent"/></g>'
        )


def _draw_spans(frame: _Frame, spans: Sequence[Span]) -> None:
    """The strip under the plot: one box per span, neighbours merged when too many to tell apart."""
    if not spans:
        return
    if len(spans) > frame.plot_w / 4:  # more boxes than can be told apart
        spans = _merge_spans(spans, frame.px)
    y0 = frame.top + frame.plot_h + 3
    p = frame.parts
    p.append('<g class="trials">')
    for s in spans:
        x0, x1 = frame.px(max(s.x0, frame.x_min)), frame.px(min(s.x1, frame.x_max))
        w = max(1.0, x1 - x0 - 0.6)
        p.append(
            f'<rect class="{s.css_class}" x="{_n(x0)}" y="{y0}" width="{_n(w)}" height="9"'
            f' fill="{s.colour}"><title>{text(s.tooltip)}</title></rect>'
        )
    p.append("</g>")


def _grid(frame: _Frame, x_kind: str, y_kind: str, x_label: str, strip: int = 0) -> None:
    p = frame.parts
    bottom = frame.top + frame.plot_h
    right = frame.left + frame.plot_w
    p.append('<g class="grid">')
    if y_kind == "bytes":
        factor, unit = _byte_unit(max(abs(frame.y_max), abs(frame.y_min)))
        ticks = [t * factor for t in nice_ticks(frame.y_min / factor, frame.y_max / factor, 4)]
        fmt = lambda v: format_axis_bytes(v, factor, unit)  # noqa: E731
    else:
        ticks = nice_ticks(frame.y_min, frame.y_max, 4)
        fmt = lambda v: f"{v:,.4g}"  # noqa: E731
    for t in ticks:
        y = frame.py(t)
        p.append(
            f'<line x1="{frame.left}" x2="{_n(right)}" y1="{_n(y)}" y2="{_n(y)}" stroke="#E3E7EE"/>'
            f'<text x="{frame.left - 6}" y="{_n(y + 4)}" text-anchor="end" class="tick">{text(fmt(t))}</text>'
        )
    xt = (
        _time_ticks(frame.x_min, frame.x_max)
        if x_kind == "seconds"
        else nice_ticks(frame.x_min, frame.x_max, 7)
    )
    for t in xt:
        x = frame.px(t)
        label = format_seconds(t) if x_kind == "seconds" else f"{t:,.10g}"
        p.append(
            f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{frame.top}" y2="{_n(bottom)}" stroke="#EEF1F5"/>'
            f'<text x="{_n(x)}" y="{_n(bottom + 14 + strip)}" text-anchor="middle" class="tick">{text(label)}</text>'
        )
    p.append(
        f'<line x1="{frame.left}" x2="{_n(right)}" y1="{_n(bottom)}" y2="{_n(bottom)}" stroke="#9AA5B5"/>'
        f'<line x1="{frame.left}" x2="{frame.left}" y1="{frame.top}" y2="{_n(bottom)}" stroke="#9AA5B5"/>'
    )
    if x_label:
        p.append(
            f'<text x="{_n(right)}" y="{_n(bottom + 28 + strip)}" text-anchor="end" class="axis">{text(x_label)}</text>'
        )
    p.append("</g>")


@dataclass(frozen=True, slots=True)
class Interval:
    """One row of an interval plot: an estimate with its low and high ends (None: unknown)."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    tooltip: str
    colour: str = PALETTE[0]


def _label_width(labels: Sequence[str]) -> int:
    """Room for the longest label (about 7.2 px a character at 11 px), between 120 and 380 px."""
    return int(min(380, max(120, 24 + 7.2 * max((len(x) for x in labels), default=0))))


def _cut(label: str, width: int) -> str:
    room = int((width - 16) / 7.2)
    return label if len(label) <= room else label[: max(1, room - 1)] + "…"


def interval_plot(
    rows: Sequence[Interval], *, width: int = 960, unit_kind: str = "bytes", title: str = ""
) -> str:
    """One row per estimate: a dot and its interval as a bar, with a zero line (a forest plot)."""
    row_h = 22
    label_w = _label_width([r.label for r in rows])
    height = 30 + row_h * max(1, len(rows))
    values = [v for r in rows for v in (r.value, r.low, r.high) if v is not None and math.isfinite(v)]
    lo = min([0.0, *values])
    hi = max([0.0, *values])
    pad = (hi - lo) * 0.08 or 1.0
    lo, hi = lo - pad, hi + pad
    plot_w = width - label_w - 20

    def px(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    factor, unit = _byte_unit(max(abs(lo), abs(hi))) if unit_kind == "bytes" else (1.0, "")
    p = [
        f'<svg class="chart intervals" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img"'
        f' aria-label="{text(title)}">'
    ]
    if title:
        p.append(f"<title>{text(title)}</title>")
    p.append('<g class="grid">')
    for t in nice_ticks(lo / factor, hi / factor, 6):
        x = px(t * factor)
        label = format_axis_bytes(t * factor, factor, unit) if unit_kind == "bytes" else f"{t:,.4g}"
        p.append(
            f'<line x1="{_n(x)}" x2="{_n(x)}" y1="6" y2="{height - 22}" stroke="#EEF1F5"/>'
            f'<text x="{_n(x)}" y="{height - 8}" text-anchor="middle" class="tick">{text(label)}</text>'
        )
    zx = px(0.0)
    p.append(f'<line x1="{_n(zx)}" x2="{_n(zx)}" y1="6" y2="{height - 22}" stroke="#9AA5B5"/></g>')
    for i, r in enumerate(rows):
        y = 18 + i * row_h
        p.append(f'<g class="interval"><title>{text(r.tooltip)}</title>')
        p.append(
            f'<text x="{label_w - 8}" y="{y + 4}" text-anchor="end" class="lbl">{text(_cut(r.label, label_w))}</text>'
        )
        if r.low is not None and r.high is not None and math.isfinite(r.low) and math.isfinite(r.high):
            p.append(
                f'<line x1="{_n(px(r.low))}" x2="{_n(px(r.high))}" y1="{y}" y2="{y}" stroke="{r.colour}"'
                f' stroke-width="3" stroke-opacity="0.45" stroke-linecap="round"/>'
            )
        if r.value is not None and math.isfinite(r.value):
            p.append(f'<circle cx="{_n(px(r.value))}" cy="{y}" r="4.5" fill="{r.colour}"/>')
        p.append("</g>")
    p.append("</svg>")
    return "".join(p)


def bar_chart(
    rows: Sequence[tuple[str, float | None, str]],
    *,
    width: int = 960,
    unit_kind: str = "bytes",
    title: str = "",
    limit: float | None = None,
) -> str:
    """Horizontal bars: (label, value, tooltip) per row, one scale, an optional limit rule."""
    row_h = 22
    label_w = _label_width([r[0] for r in rows])
    height = 30 + row_h * max(1, len(rows))
    values = [v for _, v, _ in rows if v is not None]
    hi = max([*values, limit or 0.0, 1.0]) * 1.05
    plot_w = width - label_w - 90
    factor, unit = _byte_unit(hi) if unit_kind == "bytes" else (1.0, "")

    def fmt(v: float) -> str:
        if unit_kind == "bytes":
            return format_axis_bytes(v, factor, unit)
        if unit_kind == "seconds":
            return format_seconds_short(v)
        return f"{v:,.4g}"

    p = [
        f'<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img"'
        f' aria-label="{text(title)}">'
    ]
    if title:
        p.append(f"<title>{text(title)}</title>")
    for i, (label, value, tooltip) in enumerate(rows):
        y = 10 + i * row_h
        p.append(f'<g class="bar"><title>{text(tooltip)}</title>')
        p.append(
            f'<text x="{label_w - 8}" y="{y + 12}" text-anchor="end" class="lbl">{text(_cut(label, label_w))}</text>'
        )
        if value is not None:
            w = max(1.0, value / hi * plot_w)
            colour = PALETTE[i % len(PALETTE)]
            p.append(
                f'<rect x="{label_w}" y="{y + 2}" width="{_n(w)}" height="14" rx="2" fill="{colour}"/>'
                f'<text x="{_n(label_w + w + 6)}" y="{y + 13}" class="tick">{text(fmt(value))}</text>'
            )
        else:
            p.append(f'<text x="{label_w}" y="{y + 13}" class="tick">-</text>')
        p.append("</g>")
    if limit is not None:
        x = label_w + limit / hi * plot_w
        p.append(
            f'<line x1="{_n(x)}" x2="{_n(x)}" y1="4" y2="{height - 18}" stroke="{RED}" stroke-dasharray="6 4"/>'
            f'<text x="{_n(x)}" y="{height - 4}" text-anchor="middle" fill="{RED}" class="lbl">'
            f"limit {text(fmt(limit))}</text>"
        )
    p.append("</svg>")
    return "".join(p)
