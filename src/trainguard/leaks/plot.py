"""A picture of a leak check: the series, the warm-up cut and the fitted slope (matplotlib, Agg)."""

from __future__ import annotations

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
    p = Path(path)
    if p.suffix.lower() not in _FORMATS:
        raise ConfigError(f"plot file {path!r} must end in .png or .svg, e.g. leak.png")
    if not p.parent.exists():
        raise ConfigError(f"plot file {path!r}: the folder {str(p.parent)!r} does not exist")
    return p


def plot_report(report: Any, path: str) -> str:
    """Write ``report``'s series to ``path`` (PNG or SVG) and return the path.

    Raises:
        MissingDependencyError: matplotlib is not installed (``pip install 'trainguard[plot]'``).
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
    mib = 1024.0 * 1024.0
    ys = [r["bytes"] / mib for r in report.series]
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
        if report.warmup_iterations:
            ax.axvline(report.warmup_iterations, color="orange", ls="--", label="end of warm-up")
        if report.slope_bytes_per_iter is not None and xs:
            import numpy as np

            kept = [(x, y) for x, y in zip(xs, ys, strict=False) if x >= report.warmup_iterations]
            if kept:
                kx = np.array([k[0] for k in kept], dtype=float)
                ky = np.array([k[1] for k in kept], dtype=float)
                slope = report.slope_bytes_per_iter / mib
                intercept = float(np.median(ky - slope * kx))
                ax.plot(
                    kx,
                    intercept + slope * kx,
                    color="red",
                    label=f"slope {report.slope_bytes_per_iter / 1024:+,.1f} KiB/iter",
                )
        ax.set_xlabel("iteration")
        ax.set_ylabel("MiB")
        ax.set_title(f"leakcheck: {report.verdict.value}")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        fig.savefig(str(out))
    finally:
        plt.close(fig)
    return str(out)
