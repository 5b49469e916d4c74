"""Small checks and statistics the policy modules share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["positive_int", "median"]


def positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}={value!r} must be a whole number >= {minimum}, such as 8")
    return value


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
