"""What every framework's ``MemoryCallback`` decides: the one owner of "over the limit, or
predicted to cross it: warn, stop, raise or checkpoint".

The callbacks (:mod:`~trainguard.integrations.keras_callback`,
:mod:`~trainguard.integrations.transformers_callback`,
:mod:`~trainguard.integrations.lightning_callback`) are thin shells: they read memory at their
framework's hooks (:mod:`~trainguard.integrations._memory_readings`), hand the figures to a
:class:`MemoryWatch`, and turn its answer into their framework's own words (``model.stop_training``,
``control.should_training_stop``, ``trainer.should_stop``; a checkpoint through the framework's
own saving). Nothing here imports a framework or reads a process: :func:`epoch_breach` and
:func:`batch_breach` are pure functions of the figures, and :class:`MemoryWatch` holds the
per-fit record (readings, events, the epoch it stopped at) and the action's rules (a warning once
per cause; a stop logged once; a raise carrying the limit).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

from trainguard.exceptions import ConfigError, MemoryLimitError
from trainguard.units import format_bytes, format_bytes_apart, parse_size

__all__ = [
    "ACTIONS",
    "Breach",
    "MemoryWatch",
    "batch_breach",
    "epoch_breach",
    "positive_int",
    "trial_context",
]

logger = logging.getLogger("trainguard.integrations.memory_callback")

ACTIONS = ("warn", "stop", "raise", "checkpoint")


@dataclass(frozen=True, slots=True)
class Breach:
    """Memory past a limit, or predicted to cross one: ``cause`` is ``"limit"``, ``"predicted"``
    or ``"gpu_limit"``; ``message`` says it in one line (sizes and limit never rounded alike)."""

    epoch: int
    cause: str
    message: str


def positive_int(value: Any, name: str, example: str, allow_none: bool = False) -> int | None:
    """``value`` when it is a whole number >= 1 (or None where allowed), else a one-line ConfigError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a whole number >= 1, such as {example}")
    return value


def trial_context(ctx: Any, owner: str) -> Any:
    """The trial context ``action="checkpoint"`` commits to: ``ctx``, else the running trial's.

    Args:
        ctx: a context given to the callback, or None.
        owner: the callback's class name for the message (``"MemoryCallback"``).

    Returns:
        The context.

    Raises:
        ConfigError: there is none (the fit does not run in a ``Runner`` trial).
    """
    if ctx is None:
        from trainguard.runner import current_context

        ctx = current_context()
    if ctx is None:
        raise ConfigError(
            f"{owner}(action='checkpoint') needs a trial context: run the fit in a trial "
            "def train(params, ctx) through trainguard.Runner.map, or pass ctx="
        )
    return ctx


def batch_breach(rss_bytes: int, limit_bytes: int | None, epoch: int, where: str) -> Breach | None:
    """A reading taken inside an epoch (every N batches or steps) past ``limit_bytes``.

    Args:
        rss_bytes: the process tree's RSS now.
        limit_bytes: the limit, or None (never a breach).
        epoch: the epoch the reading falls in (0-based).
        where: the place in words, such as ``"batch 7"`` or ``"step 40"``.

    Returns:
        The breach, or None.
    """
    if limit_bytes is None or rss_bytes <= limit_bytes:
        return None
    now, cap = format_bytes_apart(rss_bytes, limit_bytes)
    return Breach(epoch, "limit", f"RSS {now} is past the limit {cap} (epoch {epoch}, {where})")


def epoch_breach(
    reading: dict[str, Any],
    estimate: Any,
    *,
    epoch: int,
    limit_bytes: int | None,
    gpu_limit_bytes: int | None,
    predict: bool,
    horizon_epochs: int,
) -> Breach | None:
    """The end-of-epoch decision: the epoch's peak past ``limit_bytes``; else (with ``predict``) a
    significant growth (the interval's lower end above zero) that carries the RSS past it within
    ``horizon_epochs``; else the GPU memory in use past ``gpu_limit_bytes``.

    Args:
        reading: ``rss_bytes``, ``peak_rss_bytes`` and, where there is a GPU, ``gpu_bytes``.
        estimate: the growth per epoch (``slope``, ``ci_low``, ``ci_high`` in bytes), or None.
        epoch: the epoch that ended (0-based).
        limit_bytes: the RSS limit, or None.
        gpu_limit_bytes: the GPU limit, or None.
        predict: whether a predicted crossing counts.
        horizon_epochs: how many epochs ahead a crossing counts.

    Returns:
        The breach, or None.
    """
    rss = reading["rss_bytes"]
    if limit_bytes is not None:
        peak = reading["peak_rss_bytes"]
        if peak > limit_bytes:
            now, cap = format_bytes_apart(peak, limit_bytes)
            return Breach(epoch, "limit", f"RSS {now} is past the limit {cap} after epoch {epoch}")
        if predict and estimate is not None and estimate.ci_low > 0:
            if rss + estimate.slope * horizon_epochs > limit_bytes:
                epochs_left = (limit_bytes - rss) / estimate.slope
                now, cap = format_bytes_apart(rss, limit_bytes)  # never "1.9 GiB ... 1.9 GiB"
                return Breach(
                    epoch,
                    "predicted",
                    f"RSS grows {format_bytes(estimate.slope)}/epoch "
                    f"(95% CI {format_bytes(estimate.ci_low)} .. {format_bytes(estimate.ci_high)}); at "
                    f"{now} after epoch {epoch} it is predicted to cross the limit {cap} "
                    f"in {max(epochs_left, 0):.1f} epochs",
                )
    gpu = reading.get("gpu_bytes")
    if gpu_limit_bytes is not None and gpu is not None and gpu > gpu_limit_bytes:
        now, cap = format_bytes_apart(gpu, gpu_limit_bytes)
        return Breach(
            epoch, "gpu_limit", f"GPU memory in use {now} is past the limit {cap} after epoch {epoch}"
        )
    return None


class MemoryWatch:
    """One fit's memory record and the action's rules, shared by every ``MemoryCallback``.

    Args:
        owner: the callback's public name, for messages (``"trainguard.keras.MemoryCallback"``).
        limit: RSS of the process tree to stay under (``"4GB"`` or bytes), or None.
        gpu_limit: GPU memory in use to stay under, or None.
        action: ``"warn"``, ``"stop"``, ``"raise"`` or ``"checkpoint"``.
        predict: also act on a predicted crossing.
        horizon_epochs: how far ahead a predicted crossing counts (>= 1).
        min_epochs: epochs of readings before a growth estimate (>= 3).
        confidence: the growth interval's confidence, between 0 and 1.

    Raises:
        ConfigError: a bad argument (``UnitError`` for a size such as ``"4 potatoes"``).
    """

    def __init__(
        self,
        owner: str,
        *,
        limit: str | int | None,
        gpu_limit: str | int | None,
        action: str,
        predict: bool,
        horizon_epochs: int,
        min_epochs: int,
        confidence: float,
    ) -> None:
        self.owner = owner
        self.limit_bytes = parse_size(limit, name="limit", allow_none=True)
        self.gpu_limit_bytes = parse_size(gpu_limit, name="gpu_limit", allow_none=True)
        if action not in ACTIONS:
            raise ConfigError(f"action={action!r} must be one of 'warn', 'stop', 'raise', 'checkpoint'")
        if not isinstance(predict, bool):
            raise ConfigError(f"predict must be True or False, not {predict!r}")
        self.horizon_epochs = int(positive_int(horizon_epochs, "horizon_epochs", "1") or 0)
        self.min_epochs = int(positive_int(min_epochs, "min_epochs", "3") or 0)
        if self.min_epochs < 3:
            raise ConfigError(f"min_epochs={min_epochs!r} must be >= 3: a slope needs 3 readings")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
            raise ConfigError(f"confidence={confidence!r} must be between 0 and 1, such as 0.95")
        self.action = action
        self.predict = predict
        self.confidence = float(confidence)
        self.history: list[dict[str, Any]] = []
        self.events: list[tuple[int, str, str]] = []
        self.stopped_epoch: int | None = None
        self._warned: set[str] = set()

    def begin(self) -> None:
        """A new fit: forget the last one's readings and events."""
        self.history = []
        self.events = []
        self.stopped_epoch = None
        self._warned = set()

    def growth(self) -> Any:
        """The growth per epoch of the recorded RSS (Theil-Sen with its interval), or None before
        ``min_epochs`` readings.

        Returns:
            The estimate (``slope``, ``ci_low``, ``ci_high``), or None.
        """
        if len(self.history) < self.min_epochs:
            return None
        from trainguard.leaks.stats import robust_slope

        series = [h["rss_bytes"] for h in self.history]
        return robust_slope(series, confidence=self.confidence, resolution=4096.0)

    def on_batch(self, rss_bytes: int, where: str) -> str | None:
        """A reading inside the current epoch: what to do about it.

        Args:
            rss_bytes: the process tree's RSS now.
            where: the place in words (``"batch 7"``).

        Returns:
            ``"stop"`` or ``"checkpoint"`` for the shell to carry out, else None.

        Raises:
            MemoryLimitError: past the limit with ``action="raise"``.
        """
        breach = batch_breach(rss_bytes, self.limit_bytes, len(self.history), where)
        return self.respond(breach) if breach is not None else None

    def record(self, epoch: int, reading: dict[str, Any]) -> Any:
        """Record an epoch's reading; its ``growth_bytes_per_epoch`` and ``epoch`` are added.

        Args:
            epoch: the epoch that ended (0-based).
            reading: ``rss_bytes``, ``peak_rss_bytes`` and optionally ``gpu_bytes``, ``live_tensors``.

        Returns:
            The growth estimate (for :meth:`decide`), or None before ``min_epochs`` readings.
        """
        self.history.append(reading)
        estimate = self.growth()
        # every epoch carries the growth key (None, NaN in logs, before there is an estimate), so
        # a framework's history lists it epoch by epoch instead of shifted to the first ones
        reading["growth_bytes_per_epoch"] = estimate.slope if estimate is not None else None
        reading["epoch"] = epoch
        return estimate

    def decide(self, reading: dict[str, Any], estimate: Any) -> str | None:
        """The end-of-epoch decision on a recorded reading, and the action applied.

        Args:
            reading: the reading :meth:`record` took.
            estimate: what :meth:`record` returned.

        Returns:
            ``"stop"`` or ``"checkpoint"`` for the shell to carry out, else None.

        Raises:
            MemoryLimitError: a breach with ``action="raise"``.
        """
        breach = epoch_breach(
            reading,
            estimate,
            epoch=reading["epoch"],
            limit_bytes=self.limit_bytes,
            gpu_limit_bytes=self.gpu_limit_bytes,
            predict=self.predict,
            horizon_epochs=self.horizon_epochs,
        )
        return self.respond(breach) if breach is not None else None

    def respond(self, breach: Breach) -> str | None:
        """Record ``breach`` and apply the action: ``"raise"`` raises, ``"warn"`` warns once per
        cause, ``"stop"`` is logged once (at the first epoch it stops) and returned each time,
        ``"checkpoint"`` is returned for the shell to save at the end of the epoch.

        Args:
            breach: what was found.

        Returns:
            ``"stop"``, ``"checkpoint"`` or None.

        Raises:
            MemoryLimitError: with ``action="raise"``.
        """
        self.events.append((breach.epoch, breach.cause, breach.message))
        if self.action == "checkpoint":
            return "checkpoint"
        if self.action == "raise":
            raise MemoryLimitError(
                f"{self.owner}: {breach.message}",
                limit_bytes=self.limit_bytes,
                epoch=breach.epoch,
                cause=breach.cause,
            )
        if self.action == "stop":
            if self.stopped_epoch is None:
                self.stopped_epoch = breach.epoch
                logger.warning("trainguard MemoryCallback stops training: %s", breach.message)
            return "stop"
        if breach.cause not in self._warned:
            self._warned.add(breach.cause)
            warnings.warn(f"trainguard MemoryCallback: {breach.message}", RuntimeWarning, stacklevel=4)
        return None

    def log_values(self, reading: dict[str, Any], prefix: str) -> dict[str, float]:
        """``reading``'s figures as log values under ``prefix`` (None as NaN; no ``epoch``).

        Args:
            reading: an epoch's reading.
            prefix: the keys' prefix (``"memory_"``).

        Returns:
            ``{prefix + key: float}``.
        """
        return {
            prefix + key: float("nan") if value is None else float(value)
            for key, value in reading.items()
            if key != "epoch"
        }

    def describe_limit(self) -> str | None:
        """The limit in words for a ``repr``, or None."""
        return format_bytes(self.limit_bytes) if self.limit_bytes is not None else None
