"""A trial's peak memory as a function of its params, fitted on the trials that already ran.

In a sweep the peak depends on the params (batch size x width x sequence length ...), so a large
config need not be discovered by a kill. :func:`fit_peaks` fits, over the finished trials of one
function, the peak as a floor plus a power law in the numeric params::

    peak = base + exp(a + b1 log x1 + b2 log x2 + ...)

which covers the common shapes: the framework's own memory (``base``) plus activations and weights
multiplicative in batch size and width (a log-log fit of what is above the floor). ``base`` is
chosen from a grid by BIC together with the params; a param enters only when it lowers BIC, so a
seed or an unrelated knob is left out (and said why in :attr:`PeakFit.ignored`). With no param
kept, the fit is the peaks' level when they hardly vary (the params do not change the peak) and
"unknown" when they vary unexplained.

:meth:`PeakFit.predict` answers with a point and a prediction interval (Student's t on the log
residuals, with the leverage of the new point, so a far extrapolation gets a wide interval).
Everything here is pure: observations in, numbers out; the session decides what to do with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PeakPrediction",
    "numeric_params",
    "MIN_TRIALS",
    "over_limit",
    "not_started_message",
    "fits",
    "shrunk_to_fit",
    "pick_for_budget",
]

#: finished trials needed before a model is fitted (fewer: every prediction is "unknown")
MIN_TRIALS = 5


@dataclass(frozen=True, slots=True)
class PeakPrediction:
    """A trial's predicted peak in bytes, with a prediction interval, or why it is unknown."""

    peak_bytes: int | None
    low_bytes: int | None
    high_bytes: int | None
    reason: str
    trials: int = 0

    @property
    def known(self) -> bool:
        return self.peak_bytes is not None

    def to_dict(self) -> dict[str, Any]:
        """The prediction as JSON-ready data (an event, ``show --json``).

        Returns:
            Every field by name.
        """
        return {
            "peak_bytes": self.peak_bytes,
            "low_bytes": self.low_bytes,
            "high_bytes": self.high_bytes,
            "reason": self.reason,
            "trials": self.trials,
        }

    @classmethod
    def unknown(cls, reason: str, trials: int = 0) -> PeakPrediction:
        """A prediction that cannot be made, with the reason.

        Args:
            reason: why, in words (``"5 trials needed, 3 finished"``).
            trials: how many trials the model had.

        Returns:
            The unknown prediction.
        """
        return cls(None, None, None, reason, trials)


def numeric_params(params: Any) -> tuple[dict[str, float], dict[str, str]]:
    """The params a peak model can use (numbers, by dotted name for nested mappings) and, for the
    others, why not."""
    usable: dict[str, float] = {}
    ignored: dict[str, str] = {}

    def walk(prefix: str, value: Any, depth: int) -> None:
        if isinstance(value, Mapping) and depth < 3:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item, depth + 1)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            ignored[prefix] = "not a number"
        elif not math.isfinite(float(value)):
            ignored[prefix] = "not finite"
        else:
            usable[prefix] = float(value)

    if isinstance(params, Mapping):
        walk("", params, 0)
    return usable, ignored


# -- decisions on a prediction (pure) ------------------------------------------------------------


def over_limit(prediction: PeakPrediction, limit_bytes: int | None) -> bool:
    """Whether a trial must not start: only when even the low end of its interval is over the
    limit, so a trial that may fit always runs."""
    return bool(limit_bytes and prediction.known and (prediction.low_bytes or 0) > limit_bytes)


def not_started_message(prediction: PeakPrediction, limit: str) -> str:
    """Why a trial was not started, in words: its prediction and the ``limit`` (as the user gave
    it: ``"memory_limit=460.0 MB"``) the interval lies over."""
    from trainguard.units import format_bytes

    return (
        f"not started: predicted peak {format_bytes(prediction.peak_bytes)} "
        f"(95 % interval {format_bytes(prediction.low_bytes)} to {format_bytes(prediction.high_bytes)}) "
        f"is over {limit}; {prediction.reason}"
    )


def fits(prediction: PeakPrediction, limit_bytes: int, margin: float) -> bool:
    """Whether a trial is predicted to fit: the interval's high end under the limit less ``margin``."""
    return prediction.known and (prediction.high_bytes or 0) <= limit_bytes * (1.0 - margin)


def shrunk_to_fit(
    rule: Any,
    params: dict[str, Any],
    predict: Callable[[dict[str, Any]], PeakPrediction],
    limit_bytes: int,
    margin: float,
) -> tuple[dict[str, Any], PeakPrediction] | None:
    """With ``on_oom=Shrink(...)``: the params, shrunk by the rule's own steps, of the largest size
    predicted to fit (None when the start already fits or the model cannot say); the smallest
    size when none is predicted to fit (the OOM recovery takes it from there)."""
    from trainguard.runner.policy._oom import shrink_step

    first = predict(params)
    if not first.known or fits(first, limit_bytes, margin):
        return None
    current, prediction = params, first
    for _ in range(64):
        step = shrink_step(rule, current)
        if step is None:
            return (current, prediction) if current is not params else None
        current = step.params
        prediction = predict(current)
        if not prediction.known:
            return None
        if fits(prediction, limit_bytes, margin):
            return current, prediction
    return None


def pick_for_budget(predictions: Sequence[PeakPrediction], room_bytes: float) -> int:
    """Which pending trial a worker starts under a memory budget, given each one's prediction
    (in queue order) and the room left: the largest predicted peak that fits, so the budget is
    packed; with none that fits, a trial the model cannot size (measured peaks size it, as
    without a model), else the smallest (it waits for room)."""
    known = [(p.high_bytes or 0, i) for i, p in enumerate(predictions) if p.known]
    if not known:
        return 0
    fitting = [(size, -i) for size, i in known if size <= room_bytes]
    if fitting:
        return -max(fitting)[1]
    unknown = [i for i, p in enumerate(predictions) if not p.known]
    if unknown:
        return unknown[0]
    return min(known)[1]
