"""Memory pressure: the soft limit under the hard one, and the pure decision of when a trial is asked
to checkpoint.

The two tiers are uWSGI's ``reload-on-rss`` (graceful) under ``limit-as`` (hard), and submitit's
signal before a Slurm time limit: a trial's tree that crosses ``Policy(soft_limit=...)``, or whose
growth rate over the last seconds would carry it over ``memory_limit`` within ``pressure_horizon``,
is *under pressure*. The supervisor then raises ``ctx.under_pressure`` in the worker; a trial that
checkpoints is carried on from that checkpoint in a fresh worker, as staged trials are. The hard
limit applies throughout, as before. Everything here is a function of numbers the supervisor has
recorded: no process, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainguard.exceptions import ConfigError
from trainguard.units import format_bytes, format_duration, parse_duration, parse_size

__all__ = [
    "PressureDecision",
    "resolve_soft_limit",
    "resolve_pressure_grace",
    "growth_rate",
    "decide_pressure",
    "grace_expired",
    "RATE_WINDOW_S",
]

#: the seconds of samples the growth rate is read over: long enough to see a trend through sampling
#: noise at 100 ms, short enough to follow a trial that just started to grow
RATE_WINDOW_S = 2.0
#: fewer samples than this in the window give no rate (a prediction needs a trend)
_MIN_RATE_SAMPLES = 5


@dataclass(frozen=True, slots=True)
class PressureDecision:
    """Ask the trial to checkpoint. ``rule`` is ``"soft_limit"`` (crossed) or ``"predicted"`` (the
    hard limit is predicted within the horizon at the current rate); ``values`` the numbers seen."""

    rule: Literal["soft_limit", "predicted"]
    rss_bytes: int
    message: str
    values: dict[str, Any] = field(default_factory=dict)


def resolve_soft_limit(soft_limit: Any, memory_limit: int | None) -> int | None:
    """``Policy(soft_limit=...)`` as bytes: a size (``"450MB"``), or a fraction of ``memory_limit``
    (``0.65`` or ``"65%"``).

    Raises:
        ConfigError: negative, zero, a fraction without ``memory_limit``, or not under ``memory_limit``.
    """
    if soft_limit is None:
        return None
    if isinstance(soft_limit, bool):
        raise ConfigError(
            f"soft_limit={soft_limit!r} must be a size such as '450MB' or a fraction such as 0.65"
        )
    fraction: float | None = None
    if (
        isinstance(soft_limit, (int, float))
        and soft_limit < 0
        or (isinstance(soft_limit, str) and soft_limit.strip().startswith("-"))
    ):
        raise ConfigError(
            f"soft_limit={soft_limit!r} is negative: give a size under memory_limit such as '450MB', "
            "or a fraction of it such as 0.65"
        )
    if isinstance(soft_limit, str):
        try:
            number = float(soft_limit)
        except ValueError:
            number = None
        if number is not None and 0 < number < 1:
            soft_limit = number  # "0.65" from the command line: a fraction
    if isinstance(soft_limit, float) and 0 < soft_limit < 1:
        fraction = soft_limit
    elif isinstance(soft_limit, str) and soft_limit.strip().endswith("%"):
        try:
            fraction = float(soft_limit.strip()[:-1]) / 100.0
        except ValueError:
            raise ConfigError(f"soft_limit={soft_limit!r} is not a percentage such as '65%'") from None
        if not 0 < fraction < 1:
            raise ConfigError(
                f"soft_limit={soft_limit!r} must be a percentage of memory_limit between 0% and 100%"
            )
    if fraction is not None:
        if memory_limit is None:
            raise ConfigError(
                f"soft_limit={soft_limit!r} is a fraction of memory_limit, and there is none: set "
                "memory_limit='700MB' too, or give soft_limit as a size such as '450MB'"
            )
        return int(memory_limit * fraction)
    value = parse_size(soft_limit, name="soft_limit")
    if value <= 0:
        raise ConfigError(
            "soft_limit=0 would put every trial under pressure: give a size such as '450MB', or None"
        )
    if memory_limit is not None and value >= memory_limit:
        raise ConfigError(
            f"soft_limit={format_bytes(value)} must be under memory_limit={format_bytes(memory_limit)}: the "
            "trial is asked to checkpoint before it is killed; lower it (such as 0.65 of memory_limit)"
        )
    return value


def resolve_pressure_grace(grace: Any) -> float | None:
    """``Policy(pressure_grace=...)`` as seconds, or None (no grace: only the hard limit ends a
    trial that does not checkpoint)."""
    value = parse_duration(grace, name="pressure_grace", allow_none=True)
    if value is not None and value <= 0:
        raise ConfigError(f"pressure_grace={grace!r} must be a duration above 0 such as '30s', or None")
    return value


def growth_rate(samples: Sequence[tuple[float, int]], *, window_s: float = RATE_WINDOW_S) -> float | None:
    """The least-squares slope, in bytes per second, of ``(monotonic_s, rss_bytes)`` samples over the
    last ``window_s`` seconds; None with too few samples or no time between them."""
    if not samples:
        return None
    end = samples[-1][0]
    recent = [(t, v) for t, v in samples if t >= end - window_s]
    if len(recent) < _MIN_RATE_SAMPLES:
        return None
    n = len(recent)
    mean_t = sum(t for t, _ in recent) / n
    mean_v = sum(v for _, v in recent) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in recent)
    if var_t <= 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in recent) / var_t


def decide_pressure(
    *,
    rss_bytes: int,
    soft_limit: int | None,
    memory_limit: int | None,
    rate_bytes_per_s: float | None,
    horizon_s: float,
) -> PressureDecision | None:
    """Whether a running trial is under pressure now, from its tree's RSS and growth rate.

    The soft limit first; then, with a hard limit and a rising rate, a crossing of the hard limit
    predicted within ``horizon_s``. No soft limit: no pressure (the prediction alone is opt-in
    through the soft limit, so a policy without one behaves as before).
    """
    if soft_limit is None:
        return None
    if rss_bytes > soft_limit:
        return PressureDecision(
            "soft_limit",
            rss_bytes,
            f"tree RSS {format_bytes(rss_bytes)} crossed soft_limit {format_bytes(soft_limit)}",
            {"rss_bytes": rss_bytes, "soft_limit_bytes": soft_limit, "rate_bytes_per_s": rate_bytes_per_s},
        )
    if memory_limit is None or rate_bytes_per_s is None or not math.isfinite(rate_bytes_per_s):
        return None
    if rate_bytes_per_s <= 0:
        return None
    seconds_left = (memory_limit - rss_bytes) / rate_bytes_per_s
    if seconds_left > horizon_s:
        return None
    return PressureDecision(
        "predicted",
        rss_bytes,
        f"tree RSS {format_bytes(rss_bytes)} grows {format_bytes(rate_bytes_per_s)}/s: predicted to cross "
        f"memory_limit {format_bytes(memory_limit)} in {max(seconds_left, 0.0):.1f} s",
        {
            "rss_bytes": rss_bytes,
            "memory_limit_bytes": memory_limit,
            "rate_bytes_per_s": rate_bytes_per_s,
            "seconds_left": max(seconds_left, 0.0),
        },
    )


def grace_expired(raised_s: float, now_s: float, grace_s: float | None) -> bool:
    """Whether a trial under pressure since ``raised_s`` has used up ``pressure_grace`` without a
    checkpoint (never, with no grace)."""
    return grace_s is not None and now_s - raised_s > grace_s


def outcome_text(action: str, *, waited_s: float | None, stage: int | None, grown_bytes: int | None) -> str:
    """What a trial did under pressure, in words, for the event and ``show``."""
    if action == "checkpointed":
        grown = (
            f", {format_bytes(grown_bytes, signed=True)} grown meanwhile" if grown_bytes is not None else ""
        )
        return f"checkpointed stage {stage} {format_duration(waited_s)} after the pressure{grown}; resumes in a fresh worker"
    if action == "finished":
        return "finished before it checkpointed"
    if action == "checkpoint_failed":
        return "its checkpoint under pressure failed; the earlier checkpoint is kept"
    if action == "grace_expired":
        return f"pressure ignored for {format_duration(waited_s)} (pressure_grace): ended at the soft limit"
    return "pressure ignored; killed at the hard limit"
