"""Retries, pure: which failures run again under ``Policy(retries=..., retry_on=...)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainguard.exceptions import ConfigError
from trainguard.outcomes import ATTEMPT_STATUSES, AttemptStatus

if TYPE_CHECKING:
    from trainguard.runner.policy import Policy

__all__ = ["failure_category", "should_retry"]

#: Each recorded attempt status's ``retry_on`` family (None: never retried); the words, the families
#: and the out-of-memory set are :mod:`trainguard.outcomes`'s, which the store validates against too.
_CATEGORY = {s.value: s.retry_category for s in AttemptStatus if not s.by_store}


def failure_category(status: str) -> str | None:
    """The ``retry_on`` family of an attempt status (None for "ok" and never-retried failures)."""
    try:
        return _CATEGORY[status]
    except KeyError:
        raise ConfigError(
            f"unknown attempt status {status!r}: one of {', '.join(ATTEMPT_STATUSES)}"
        ) from None


def should_retry(policy: Policy, status: str, attempts: int) -> bool:
    """Whether a trial whose latest attempt (the ``attempts``-th) ended with ``status`` runs again."""
    category = failure_category(status)
    return category is not None and category in policy.retry_on and attempts <= policy.retries
