"""Parsing and formatting of sizes ("4GB", "512MiB") and durations ("30s", "5m").

Decimal units (kB, MB, GB, TB) are powers of 1000 and binary units (KiB, MiB, GiB, TiB) powers of
1024, as on disk labels and in ``free --si``; ``K``/``M``/``G`` alone are read as binary, as in
``ulimit`` and Docker. A size written as text needs a unit ("1.5" is refused, not read as 2 bytes;
"0" alone is let through); a Python int (or a float with no fraction) is a plain byte count. A bare
number is seconds. Anything else raises a one-line :class:`~trainguard.exceptions.UnitError` that
shows a valid example.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Literal, overload

from trainguard.exceptions import ConfigError, UnitError

__all__ = [
    "parse_size",
    "parse_duration",
    "format_bytes",
    "format_bytes_apart",
    "format_duration",
    "renamed_argument",
]

_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_DURATION_UNITS = {
    "": 1.0,
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_NUMBER_UNIT = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


@overload
def parse_size(
    value: str | int | float | None, *, name: str = ..., allow_none: Literal[False] = ...
) -> int: ...
@overload
def parse_size(value: str | int | float | None, *, name: str = ..., allow_none: bool) -> int | None: ...
def parse_size(
    value: str | int | float | None, *, name: str = "size", allow_none: bool = False
) -> int | None:
    """Return ``value`` as a number of bytes.

    Args:
        value: a whole number of bytes (an int, or a float with no fraction), or a string with a
            unit such as ``"4GB"``, ``"512MiB"``, ``"1.5G"`` (a string with no unit is refused, but
            ``"0"``).
        name: the argument's name, used in the error message.
        allow_none: let ``None`` through (meaning "no limit").

    Raises:
        UnitError: the value is negative, not a number, has no unit or an unknown one, or is a
            fraction of a byte; its ``problem`` ("is negative", "is not a size", "is not a finite
            number", "has no unit", "is a fraction of a byte") lets a caller give its own example.

    Returns:
        The size in bytes, or None when ``value`` is None and ``allow_none`` is set.
    """
    if value is None:
        if allow_none:
            return None
        raise UnitError(f"{name} is required: give a size such as '4GB' or '512MiB'", value=value)
    if isinstance(value, bool):
        raise UnitError(
            f"{name}={value!r} is not a size: give a size such as '4GB' or '512MiB'",
            value=value,
            problem="is not a size",
        )
    if isinstance(value, (int, float)):
        number, factor = float(value), 1
        if math.isfinite(number) and number != int(number):
            raise UnitError(
                f"{name}={value!r} is a fraction of a byte: give a whole number of bytes, or a unit such as '{value:g}GB'",
                value=value,
                problem="is a fraction of a byte",
            )
    elif isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        unit = match.group(2).lower() if match else None
        if match and unit == "" and float(match.group(1)) != 0:
            # "1.5" read as bytes made --soft-limit 1.5 a limit of 2 bytes
            number_text = match.group(1).lstrip("+")
            raise UnitError(
                f"{name}={value!r} has no unit: give a unit, such as '{number_text}GB' or '{number_text}MiB'",
                value=value,
                problem="has no unit",
            )
        if match and unit == "":
            unit = "b"
        if not match or unit not in _SIZE_UNITS:
            raise UnitError(
                f"{name}={value!r} is not a size: use a number and a unit such as '4GB', '512MiB' or '200MB'",
                value=value,
                problem="is not a size",
            )
        number, factor = float(match.group(1)), _SIZE_UNITS[unit]
    else:
        raise UnitError(
            f"{name} must be a size string such as '4GB' or a number of bytes, not {type(value).__name__}",
            value=repr(value),
        )
    if not math.isfinite(number):
        raise UnitError(
            f"{name}={value!r} is not a finite number: give a size such as '4GB'",
            value=value,
            problem="is not a finite number",
        )
    if number < 0:
        raise UnitError(
            f"{name}={value!r} is negative: give a size such as '4GB'",
            value=value,
            problem="is negative",
        )
    return int(round(number * factor))


@overload
def parse_duration(
    value: str | int | float | None, *, name: str = ..., allow_none: Literal[False] = ...
) -> float: ...
@overload
def parse_duration(value: str | int | float | None, *, name: str = ..., allow_none: bool) -> float | None: ...
def parse_duration(
    value: str | int | float | None, *, name: str = "duration", allow_none: bool = False
) -> float | None:
    """Return ``value`` as seconds. Accepts ``30``, ``"30s"``, ``"5m"``, ``"1.5h"``, ``"250ms"``.

    Raises:
        UnitError: the value is negative, not a number, or has an unknown unit.

    Args:
        value: seconds as a number, or a string such as ``"30s"``, ``"5m"``, ``"1.5h"``, ``"250ms"``.
        name: the argument's name, used in the error message.
        allow_none: let ``None`` through (meaning "no limit").

    Returns:
        The duration in seconds, or None when ``value`` is None and ``allow_none`` is set.
    """
    if value is None:
        if allow_none:
            return None
        raise UnitError(f"{name} is required: give a duration such as '30s' or '5m'", value=value)
    if isinstance(value, bool):
        raise UnitError(f"{name}={value!r} is not a duration: give one such as '30s' or '5m'", value=value)
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        unit = match.group(2).lower() if match else None
        if not match or unit not in _DURATION_UNITS:
            raise UnitError(
                f"{name}={value!r} is not a duration: use a number and a unit such as '30s', '5m' or '1h'",
                value=value,
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    else:
        raise UnitError(
            f"{name} must be a duration string such as '30s' or a number of seconds, not {type(value).__name__}",
            value=repr(value),
        )
    if not math.isfinite(seconds):
        raise UnitError(
            f"{name}={value!r} is not a finite number: give a duration such as '30s'", value=value
        )
    if seconds < 0:
        raise UnitError(f"{name}={value!r} is negative: give a duration such as '30s' or '5m'", value=value)
    return seconds


def format_bytes(n: float | int | None, *, signed: bool = False, digits: int = 1) -> str:
    """Human-readable binary size: ``format_bytes(56_000_000) == '53.4 MiB'``.

    ``digits`` is the number of decimals for KiB and above.

    Args:
        n: a number of bytes; None gives ``"-"``.
        signed: write a ``+`` before a positive size (for growth figures).
        digits: the number of decimals for KiB and above.

    Returns:
        The size in binary units (B, KiB, MiB, GiB, TiB).
    """
    if n is None:
        return "-"
    sign = "-" if n < 0 else ("+" if signed and n > 0 else "")
    value = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{value:.0f} B"
            return f"{sign}{value:.{digits}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_bytes_apart(a: float | int, b: float | int) -> tuple[str, str]:
    """Two sizes compared in one message, with enough decimals that unequal values read unequal:
    ``format_bytes_apart(2_040_000_000, 2_030_000_000) == ('1.900 GiB', '1.891 GiB')``, never
    "1.9 GiB > 1.9 GiB". Equal-looking values fall back to exact bytes.

    Args:
        a: the first size in bytes.
        b: the second size in bytes.

    Returns:
        The two sizes written with as many decimals (up to 3) as tell them apart, or exact bytes.
    """
    for digits in (1, 2, 3):
        left, right = format_bytes(a, digits=digits), format_bytes(b, digits=digits)
        if left != right or a == b:
            return left, right
    return f"{int(a):,} B", f"{int(b):,} B"


def format_duration(seconds: float | None) -> str:
    """Human-readable duration: ``'850 ms'``, ``'12.3 s'``, ``'4m05s'``, ``'1h02m'``.

    Args:
        seconds: a duration; None gives ``"-"``.

    Returns:
        The duration in the largest fitting units.
    """
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def renamed_argument(
    new: str, value: float | str | None, old: str, old_value: float | str | None, default: float
) -> float | str:
    """The value of an argument renamed from ``old`` to ``new`` (both default to None): the new
    one's, or the old one's with a DeprecationWarning naming the new name, or ``default``.

    Raises:
        ConfigError: both names were given.

    Args:
        new: the argument's current name (for the messages).
        value: the value given under the new name, or None.
        old: the deprecated name (for the messages).
        old_value: the value given under the old name, or None.
        default: the value when neither was given.

    Returns:
        The value to use.
    """
    if old_value is None:
        return default if value is None else value
    if value is not None:
        raise ConfigError(f"give {new}= only: {old}= is its deprecated older name")
    warnings.warn(
        f"{old}= is deprecated: use {new}=, which takes the same values", DeprecationWarning, stacklevel=3
    )
    return old_value
