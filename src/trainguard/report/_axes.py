"""The run report's chart axes, as pure decisions: the memory axis fitted to the data (the memory
limit shown only when it is near), and the time axis with the idle gaps between sessions cut out.

A 49 -> 69 MiB trial on a 0 .. 1.9 GiB axis (the limit) reads as a flat line, and a run resumed the
next morning is a sliver at each end of a day-long axis: both hid what the chart is for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: the limit is drawn when it is at most this many times the highest reading
LIMIT_NEAR = 1.5
#: a stretch with no reading and no attempt running longer than this is cut from the time axis
GAP_S = 10.0


def memory_axis(values: Sequence[float], limit: float | None) -> tuple[tuple[float, float], bool]:
    """The y range fitted to ``values`` (15 % padding each side, never below 0), and whether the
    memory ``limit`` is near enough to draw as a line (the range then reaches it)."""
    data = [v for v in values if v > 0]
    lo, hi = (min(data), max(data)) if data else (0.0, 1.0)
    show_limit = bool(limit) and limit is not None and limit <= hi * LIMIT_NEAR
    if show_limit and limit is not None:
        hi = max(hi, float(limit))
    pad = max((hi - lo) * 0.15, hi * 0.02, 1.0)
    return (max(0.0, lo - pad), hi + pad), show_limit


@dataclass(frozen=True, slots=True)
class TimeCuts:
    """Idle gaps cut from a time axis: ``gaps`` as (start, end) in seconds since the run started."""

    gaps: tuple[tuple[float, float], ...]

    def at(self, t: float) -> float:
        """Where ``t`` (seconds since the run started) lies on the cut axis."""
        return t - sum(min(t, end) - start for start, end in self.gaps if t > start)

    def mapper(self) -> Callable[[float], float]:
        return self.at


def idle_gaps(busy: Sequence[tuple[float, float]], *, min_gap_s: float = GAP_S) -> TimeCuts:
    """The gaps longer than ``min_gap_s`` between the ``busy`` intervals (readings as zero-length
    intervals, attempts from start to finish), in the same clock."""
    gaps: list[tuple[float, float]] = []
    reach: float | None = None
    for start, end in sorted(busy):
        if reach is not None and start - reach > min_gap_s:
            gaps.append((reach, start))
        reach = end if reach is None else max(reach, end)
    return TimeCuts(tuple(gaps))
