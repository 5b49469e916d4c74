"""Small text helpers shared by the store-reading subcommands (runs, show, demo): no framework imports."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.outcomes import Failure

__all__ = [
    "when",
    "short_value",
    "sparkline",
    "console",
    "visible",
    "markup_safe",
    "strict_json",
    "to_json",
    "error_text",
    "say",
]

_BARS = "▁▂▃▄▅▆▇█"


def _control_table(keep_newlines: bool) -> dict[int, str]:
    codes = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
    # bidirectional overrides and isolates reorder what the terminal shows (a "Trojan Source" trick)
    codes += [0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    table = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in codes}
    if keep_newlines:
        del table[ord("\n")], table[ord("\t")]
    return table


_ONE_LINE = _control_table(keep_newlines=False)
_MULTI_LINE = _control_table(keep_newlines=True)


def visible(text: Any, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as an escape instead of obeyed by the terminal.

    Escape sequences in a user's exception message, result, run name or file name (``"\\x1b[2J"``
    clears the screen, ``"\\x1b]0;...\\x07"`` retitles the window) come out as the characters
    ``\\x1b[2J``, piped or not. C0 and C1 controls, DEL and the bidirectional overrides are
    escaped; ``keep_newlines`` keeps ``\\n`` and ``\\t`` (for tracebacks printed as blocks).
    """
    return str(text).translate(_MULTI_LINE if keep_newlines else _ONE_LINE)


def markup_safe(text: Any, *, keep_newlines: bool = False) -> str:
    """:func:`visible`, then rich's markup escaped: a user string ready for ``Console.print``."""
    from rich.markup import escape

    return escape(visible(text, keep_newlines=keep_newlines))


def say(text: str, stream: Any = None) -> bool:
    """Write one line to ``stream`` (default stderr); False, and the stream silenced, if its pipe is closed.

    ``trainguard run ... 2>&1 | head -5`` closes the pipe while trials still run: the run must go
    on and end ``completed``, so a closed pipe only stops the printing (the stream's descriptor is
    pointed at /dev/null, so later writes and the interpreter's final flush stay quiet).
    """
    import os
    import sys

    stream = sys.stderr if stream is None else stream
    try:
        stream.write(text + "\n")
        stream.flush()
        return True
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass
        return False


def strict_json(value: Any) -> Any:
    """``value`` with every NaN and infinity replaced by None, so strict JSON parsers accept it.

    JSON has no NaN or Infinity; ``json.dumps`` writes ``NaN`` by default, which ``jq``, browsers
    and most other languages reject. trainguard's ``--json`` output writes ``null`` instead.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def to_json(value: Any, **kwargs: Any) -> str:
    """Strict JSON text (see :func:`strict_json`); ``kwargs`` go to ``json.dumps``."""
    return json.dumps(strict_json(value), allow_nan=False, **kwargs)


def error_text(error: Failure | None, fallback: str = "failed") -> str:
    """A stored trial error in one line, its cause first and the exception's name said once.

    Workers store an exception as ``type`` (``"builtins.ValueError"``) and ``message``
    (``"ValueError: bad lr"``), which already starts with the short name: ``"ValueError: bad lr"``.
    A failure that is not an exception carries its ``status`` (``timeout``, ``killed_memory``,
    ``crashed``...): ``"timeout: killed at the trial timeout (2 s)"``.
    """
    if error is None:
        return fallback
    message = error.message
    kind = error.exc_type or error.detail.get("kind")
    status = error.status or None
    if kind:
        short = str(kind).rpartition(".")[2]
        if not message:
            return short
        if message.startswith(f"{short}:") or message.startswith(f"{kind}:"):
            return message
        prefix = short if status in (None, "exception", "framework_oom") else f"{status}: {short}"
        return f"{prefix}: {message}"
    if status and not message:
        return str(status)
    if status and not message.startswith(f"{status}:"):
        return f"{status}: {message}"
    return message or fallback


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


def console(*, stderr: bool = False, pipe_width: int = 120):
    """A rich Console bound to the current stdout/stderr (so tests capturing them see the output).

    ``pipe_width`` is the width used when the stream is not a terminal.
    """
    import sys

    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 ("the check failed"); cli.main() exits 141 quietly instead
            raise BrokenPipeError

    stream = sys.stderr if stderr else sys.stdout
    # rich assumes 80 columns when not on a terminal; tables of runs read better a little wider in
    # files and pipes, and a terminal's own width still wins.
    width = None if getattr(stream, "isatty", lambda: False)() else pipe_width
    return _Console(file=stream, highlight=False, soft_wrap=False, width=width)
