"""Out-of-memory recovery, pure: the :class:`Shrink` rule and the next attempt's parameters.

A trial ended by any OOM cause (killed at ``memory_limit``/``gpu_memory_limit``, a framework OOM
exception, the OS OOM killer) runs again in a fresh worker with the named integer parameter shrunk
(:func:`shrink_step`), and with ``accumulate`` the accumulation parameter grown so the effective
batch stays the same. The supervisor's recovery (``runner/session/_recovery.py``) carries it out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.outcomes import OOM_STATUSES
from trainguard.runner.policy._values import positive_int

__all__ = ["OOM_STATUSES", "Shrink", "ShrinkStep", "shrink_step", "params_without", "resize", "start_at"]


@dataclass(frozen=True, slots=True)
class Shrink:
    """Out-of-memory recovery: rerun the trial in a fresh worker with an integer parameter shrunk.

    ``Policy(on_oom=Shrink("batch_size", factor=0.5, minimum=1, accumulate="grad_accum"))``: a trial
    that ends by any out-of-memory cause runs again in a new worker (the one that ran out of memory
    is never reused) with ``batch_size`` times ``factor`` (at least 1 smaller, never under
    ``minimum``). With ``accumulate``, that parameter (default 1 when absent) grows so that
    ``batch_size x accumulate``, the effective batch, stays the same: the new size is the largest
    divisor of the effective batch at or under ``size x factor`` when there is one. The size that
    worked is remembered in the store per (function, params without these two keys, device and
    limits), and later trials and runs start there.

    Args:
        key: the integer parameter to shrink (``"batch_size"``).
        factor: the shrink factor per out-of-memory attempt, in (0, 1).
        minimum: the smallest size tried; an OOM there fails the trial.
        accumulate: the gradient-accumulation parameter the trial function reads, or None.
        mixed_precision: before the first shrink, retry at the same size with Keras's
            ``mixed_float16`` global policy set in the fresh worker (kept for later attempts).
        max_attempts: the most out-of-memory attempts one trial gets (shrinks included).
        remember: read and write the remembered size in the store.

    Raises:
        ConfigError: a value of the wrong kind or out of range.
    """

    key: str = "batch_size"
    factor: float = 0.5
    minimum: int = 1
    accumulate: str | None = None
    mixed_precision: bool = False
    max_attempts: int = 12
    remember: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise ConfigError(f"Shrink key={self.key!r} must name an integer parameter, such as 'batch_size'")
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or not (math.isfinite(self.factor) and 0.0 < self.factor < 1.0)
        ):
            raise ConfigError(
                f"Shrink factor={self.factor!r} must be between 0 and 1 (exclusive), such as 0.5"
            )
        object.__setattr__(self, "factor", float(self.factor))
        positive_int(self.minimum, "Shrink minimum")
        if self.accumulate is not None and (not isinstance(self.accumulate, str) or not self.accumulate):
            raise ConfigError(
                f"Shrink accumulate={self.accumulate!r} must name a parameter such as 'grad_accum', or None"
            )
        if self.accumulate == self.key:
            raise ConfigError(f"Shrink accumulate={self.accumulate!r} must differ from key={self.key!r}")
        if not isinstance(self.mixed_precision, bool):
            raise ConfigError(f"Shrink mixed_precision={self.mixed_precision!r} must be True or False")
        positive_int(self.max_attempts, "Shrink max_attempts")
        if not isinstance(self.remember, bool):
            raise ConfigError(f"Shrink remember={self.remember!r} must be True or False")

    @classmethod
    def parse(cls, text: str) -> Shrink:
        """``"shrink:batch_size,factor=0.5,minimum=1,accumulate=grad_accum,mixed_precision"`` (CLI form).

        Raises:
            ConfigError: not that form, an unknown option, or a bad value.

        Args:
            text: the ``--on-oom`` value.

        Returns:
            The rule.
        """
        example = "shrink:batch_size,factor=0.5,minimum=1,accumulate=grad_accum"
        head, sep, rest = str(text).partition(":")
        parts = [p.strip() for p in rest.split(",")] if sep else []
        if head.strip() != "shrink" or not parts or not parts[0] or "=" in parts[0]:
            raise ConfigError(f"--on-oom {text!r} is not understood: use e.g. '{example}'")
        kwargs: dict[str, Any] = {"key": parts[0]}
        for part in parts[1:]:
            name, eq, value = part.partition("=")
            name = name.strip()
            try:
                if name == "mixed_precision" and not eq:
                    kwargs[name] = True
                elif name == "mixed_precision":
                    kwargs[name] = {"true": True, "false": False, "1": True, "0": False}[value.lower()]
                elif name == "factor":
                    kwargs[name] = float(value)
                elif name in ("minimum", "max_attempts"):
                    kwargs[name] = int(value)
                elif name == "accumulate" and value:
                    kwargs[name] = value
                else:
                    raise KeyError(name)
            except (KeyError, ValueError):
                raise ConfigError(
                    f"--on-oom option {part!r} is not understood: options are factor=, minimum=, accumulate=, "
                    f"max_attempts=, mixed_precision (e.g. '{example}')"
                ) from None
        return cls(**kwargs)

    def check_params(self, params: Any, where: str = "params") -> None:
        """Say in one line what is wrong with ``params`` for this rule, before anything runs.

        Raises:
            ConfigError: the key is missing or not a whole number, ``minimum`` is above the
                starting size, or the accumulation parameter is not a whole number >= 1.

        Args:
            params: one trial's params.
            where: how the message names the params (``"params"``, ``"trial 3's params"``).
        """
        if self.key not in params:
            keys = ", ".join(sorted(params)) or "none"
            raise ConfigError(
                f"on_oom Shrink key {self.key!r} is not in {where} (its keys: {keys}): "
                f"name the batch-size parameter the trial reads"
            )
        size = params[self.key]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(
                f"on_oom Shrink key {self.key!r} is {size!r} in {where}: it must be a whole number >= 1 "
                f"to be shrunk, such as 64"
            )
        if self.minimum > size:
            raise ConfigError(
                f"on_oom Shrink minimum={self.minimum} is above the starting {self.key}={size} in {where}: "
                f"lower minimum or start larger"
            )
        if self.accumulate is not None and self.accumulate in params:
            acc = params[self.accumulate]
            if isinstance(acc, bool) or not isinstance(acc, int) or acc < 1:
                raise ConfigError(
                    f"on_oom Shrink accumulate {self.accumulate!r} is {acc!r} in {where}: "
                    f"it must be a whole number >= 1, such as 1"
                )

    def to_dict(self) -> dict[str, Any]:
        """The rule as JSON-ready data (stored with the run's policy).

        Returns:
            Every field by name.
        """
        return {name: getattr(self, name) for name in Shrink.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class ShrinkStep:
    """What the next attempt of an out-of-memory trial runs with.

    ``params`` are the next attempt's params; ``size``/``accumulation`` its values of the rule's keys
    (``accumulation`` None without ``accumulate``); ``effective_batch`` is size x accumulation;
    ``mixed_precision`` whether the attempt sets Keras's ``mixed_float16`` policy first.
    """

    params: dict[str, Any]
    size: int
    previous_size: int
    accumulation: int | None
    previous_accumulation: int | None
    effective_batch: int
    previous_effective_batch: int
    mixed_precision: bool
    message: str


def _accumulation(rule: Shrink, params: dict[str, Any]) -> int | None:
    if rule.accumulate is None:
        return None
    return int(params.get(rule.accumulate, 1))


def resize(rule: Shrink, params: dict[str, Any], size: int) -> dict[str, Any]:
    """``params`` with the rule's key set to ``size`` and, with ``accumulate``, the accumulation set
    so the effective batch stays (exactly when ``size`` divides it, else rounded up)."""
    out = dict(params)
    old = int(params[rule.key])
    out[rule.key] = int(size)
    acc = _accumulation(rule, params)
    if acc is not None and rule.accumulate is not None:
        effective = old * acc
        out[rule.accumulate] = max(1, -(-effective // int(size)))
    return out


def start_at(rule: Shrink, params: dict[str, Any], size: int) -> dict[str, Any]:
    """``params`` started at a remembered ``size``: with ``accumulate``, the largest divisor of the
    effective batch at or under ``size`` (not under ``minimum``), so the effective batch stays exact."""
    size = max(int(size), rule.minimum)
    acc = _accumulation(rule, params)
    if acc is not None:
        effective = int(params[rule.key]) * acc
        divisors = [d for d in range(min(size, effective), rule.minimum - 1, -1) if effective % d == 0]
        if divisors:
            size = divisors[0]
    return resize(rule, params, size)


def shrink_step(
    rule: Shrink, params: dict[str, Any], *, mixed_precision_on: bool = False
) -> ShrinkStep | None:
    """The next attempt after an out-of-memory one that ran with ``params``; None when the size is
    already at the rule's minimum (and mixed precision, if opted into, is already on)."""
    size = int(params[rule.key])
    acc = _accumulation(rule, params)
    effective = size * (acc or 1)
    if rule.mixed_precision and not mixed_precision_on:
        return ShrinkStep(
            dict(params),
            size,
            size,
            acc,
            acc,
            effective,
            effective,
            True,
            f"retrying at {rule.key}={size} with Keras mixed_float16",
        )
    if size <= rule.minimum:
        return None
    target = max(rule.minimum, int(size * rule.factor))
    if target >= size:
        target = size - 1
    new_size = target
    if acc is not None:
        divisors = [d for d in range(target, rule.minimum - 1, -1) if effective % d == 0]
        if divisors:
            new_size = divisors[0]
    new_params = resize(rule, params, new_size)
    new_acc = _accumulation(rule, new_params)
    new_effective = new_size * (new_acc or 1)
    words = f"{rule.key}={new_size}"
    if new_acc is not None:
        words += f", {rule.accumulate}={new_acc} (effective batch {new_effective}"
        words += ")" if new_effective == effective else f", was {effective}: {new_size} does not divide it)"
    return ShrinkStep(
        new_params,
        new_size,
        size,
        new_acc,
        acc,
        new_effective,
        effective,
        mixed_precision_on,
        f"retrying in a fresh worker with {words}",
    )


def params_without(params: dict[str, Any], keys: Sequence[str | None]) -> str:
    """Canonical JSON of ``params`` less ``keys``: what a remembered size is looked up by."""
    import json

    rest = {k: v for k, v in params.items() if k not in keys}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), default=str)
