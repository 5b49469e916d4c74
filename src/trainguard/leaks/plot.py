"""A picture of a leak check: the series, the warm-up cut and the fitted slope (matplotlib, Agg)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from trainguard.exceptions import ConfigError, missing

__all__ = ["plot_report", "check_plot_path"]

_FORMATS = (".png", ".svg")


def check_plot_path(path: str) -> Path:
    """Validate the output path before any work.

    Raises:
        ConfigError: an extension other than .png/.svg, or a folder that does not exist.
    """
    from trainguard._safe_write import check_output_file

    p = Path(path)
    if p.suffix.lower() not in _FORMATS:
        raise ConfigError(f"plot file {path!r} must end in .png or .svg, e.g. leak.png")
    if not p.parent.exists():
        raise ConfigError(f"plot file {path!r}: the folder {str(p.parent)!r} does not exist")
    check_output_file(path, flag="--plot", what="the plot")  # no link or FIFO another user planted
    return p


def _unit(values: list[float]) -> tuple[str, float]:
    """The binary unit the text and table use (trainguard.units.format_bytes) for these values."""
    top = max((abs(v) for v in values), default=0.0)
    for unit, scale in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if top >= scale:
            return unit, scale
    return "B", 1.0


def _slope_and_band(ax: Any, report: Any, xs: list[float], ys: list[float], scale: float) -> None:
    """The fitted slope over the settled part and its 95 % interval as a band around it."""
    import numpy as np

    from trainguard.units import format_bytes

    kept = [(x, y) for x, y in zip(xs, ys, strict=False) if x >= report.warmup_iterations]
    if not kept:
        return
    kx = np.array([k[0] for k in kept], dtype=float)
    ky = np.array([k[1] for k in kept], dtype=float)
    slope = report.slope_bytes_per_iter / scale
    # the line and the band pivot where the fit is best known: the middle of the settled part
    x0 = float(np.median(kx))
    y0 = float(np.median(ky - slope * (kx - x0)))
    label = f"slope {format_bytes(report.slope_bytes_per_iter, signed=True)}/iter"
    ax.plot(kx, y0 + slope * (kx - x0), color="red", label=label)
    low, high = report.ci_low_bytes_per_iter, report.ci_high_bytes_per_iter
    if low is not None and high is not None:
        lo, hi = y0 + low / scale * (kx - x0), y0 + high / scale * (kx - x0)
        band = f"95 % interval {format_bytes(low, signed=True)} .. {format_bytes(high, signed=True)}/iter"
        ax.fill_between(kx, np.minimum(lo, hi), np.maximum(lo, hi), color="red", alpha=0.15, label=band)


def plot_report(report: Any, path: str) -> str:
    """Write ``report``'s series to ``path`` (PNG or SVG) and return the path.

    Raises:
        MissingDependencyError: matplotlib is not installed (``pip install -e '.[plot]'``).
        ConfigError: a bad path.
    """
    out = check_plot_path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing("matplotlib", "plotting a leak check", extra="plot") from None

    xs = [r["iteration"] for r in report.series]
    unit, scale = _unit([r["bytes"] for r in report.series])
    mib = scale
    ys = [r["bytes"] / scale for r in report.series]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        ax.plot(xs, ys, "o-", ms=3, lw=1, label=f"{report.metric} after gc + trim")
        untrimmed = [
            (r["iteration"], r["untrimmed_bytes"] / mib) for r in report.series if r.get("untrimmed_bytes")
        ]
        if untrimmed:
            ax.plot(
                *zip(*untrimmed, strict=False),
                ".",
                ms=3,
                alpha=0.4,
                color="grey",
                label=f"{report.metric} before malloc_trim",
            )
        live = [(r["iteration"], r["live_bytes"] / scale) for r in report.series if r.get("live_bytes")]
        if live:
            ax.plot(
                *zip(*live, strict=False),
                "-",
                lw=1,
                color="#CC79A7",
                label="live memory: bytes in use + RSS outside glibc's heaps",
            )
        if report.warmup_iterations:
            ax.axvline(report.warmup_iterations, color="orange", ls="--", label="end of warm-up")
        if report.slope_bytes_per_iter is not None and xs:
            _slope_and_band(ax, report, xs, ys, scale)
        in_use = [
            (r["iteration"], r["allocated_bytes"] / scale) for r in report.series if r.get("allocated_bytes")
        ]
        if in_use:
            # bytes in use sit far below RSS (the interpreter, pymalloc's arenas): their own axis,
            # in the same unit, so their slope reads against the RSS slope
            twin = ax.twinx()
            twin.plot(*zip(*in_use, strict=False), "s-", ms=2, lw=1, color="purple", alpha=0.7)
            twin.set_ylabel(f"C allocator bytes in use ({unit})", color="purple")
        ax.set_xlabel("iteration")
        ax.set_ylabel(unit)
        ax.set_title(f"leakcheck: {report.verdict.value}")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        image = io.BytesIO()
        fig.savefig(image, format=out.suffix.lower().lstrip("."))
    finally:
        plt.close(fig)
    # written as every output file is (trainguard._safe_write): never through another user's link
    from trainguard._safe_write import write_output_file

    write_output_file(path, image.getvalue(), flag="--plot", what="the plot")
    return str(out)
