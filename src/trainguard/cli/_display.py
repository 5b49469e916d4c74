"""Small text helpers shared by the store-reading subcommands (runs, show, demo): no framework imports."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["when", "short_value", "sparkline", "console"]

_BARS = "▁▂▃▄▅▆▇█"


def when(unix_s: float | None) -> str:
    """Local time of day with the date: ``'2025-06-01 14:03:12'``; ``'-'`` for None."""
    if unix_s is None:
        return "-"
    return _dt.datetime.fromtimestamp(unix_s).strftime("%Y-%m-%d %H:%M:%S")


def short_value(value: Any, width: int = 40) -> str:
    """A trial result on one line: numbers rounded, dicts as ``key=value``, cut at ``width`` characters."""
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        parts = []
        for key, item in value.items():
            parts.append(f"{key}={item:.4g}" if isinstance(item, float) else f"{key}={json.dumps(item)}")
        text = " ".join(parts)
    else:
        text = json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def sparkline(
    values: Sequence[float], width: int = 40, *, low: float | None = None, high: float | None = None
) -> str:
    """Values as a row of block characters, max-pooled to at most ``width`` columns.

    ``low``/``high`` fix the scale so that two curves drawn side by side are comparable.
    """
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [
            max(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)]) for i in range(width)
        ]
    lo = min(values) if low is None else low
    hi = max(values) if high is None else high
    span = hi - lo
    if span <= 0:
        return _BARS[0] * len(values)
    return "".join(
        _BARS[min(len(_BARS) - 1, max(0, int((v - lo) / span * (len(_BARS) - 1) + 0.5)))] for v in values
    )


def console(*, stderr: bool = False):
    """A rich Console bound to the current stdout/stderr (so tests capturing them see the output)."""
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # rich assumes 80 columns when not on a terminal; tables of runs read better a little wider in
    # files and pipes, and a terminal's own width still wins.
    width = None if getattr(stream, "isatty", lambda: False)() else 120
    return Console(file=stream, highlight=False, soft_wrap=False, width=width)
