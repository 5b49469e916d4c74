"""What a Node step's leak check says about misuse TF.js itself only logs (``js/trainguard/lib/misuse.js``).

The Node process reports, with every answer, its records so far: ``tf.tidy()`` given an async
function (where in the user's code, how often, how its async work ended) and Error objects the
step caught and logged; and ``failed_calls``, the calls in which one of those failed. A step whose
every call failed is not a memory question: the check stops and says so (``inconclusive``, exit
3), whatever memory did, since what memory did is that of a failing step. Pure functions here;
the loop (``_node._NodeLoop``) asks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Misuse", "FAILED_CALLS_TO_STOP", "from_answer", "every_call_failed", "failed_reason", "hints"]

#: Calls that all failed after which the check stops: enough to tell "every call" from "a few".
FAILED_CALLS_TO_STOP = 10

ASYNC_TIDY = "async-tidy"


@dataclass(frozen=True, slots=True)
class Misuse:
    """The Node process's records (as it sent them) and its count of calls that failed."""

    records: tuple[dict[str, Any], ...] = ()
    failed_calls: int = 0

    def to_list(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.records]


def from_answer(answer: dict[str, Any], previous: Misuse) -> Misuse:
    """The records of a ``done`` or ``step_error`` answer (cumulative), or ``previous`` when it has none."""
    records = answer.get("misuse")
    if records is None:
        return previous
    return Misuse(tuple(r for r in records if isinstance(r, dict)), int(answer.get("failed_calls") or 0))


def every_call_failed(misuse: Misuse, iterations: int) -> bool:
    """Whether each of the ``iterations`` calls made so far failed (caught or not by the step)."""
    return iterations > 0 and misuse.failed_calls >= iterations


def _first_failure(misuse: Misuse) -> dict[str, Any] | None:
    for r in misuse.records:
        if (r.get("kind") == ASYNC_TIDY and r.get("rejected")) or (
            r.get("kind") != ASYNC_TIDY and r.get("count")
        ):
            return r
    return None


def failed_reason(misuse: Misuse, iterations: int) -> str:
    """The reason of a check whose every call failed: how, where, and the fix when it is a misuse."""
    first = _first_failure(misuse)
    error = (first or {}).get("error") or {}
    what = f"{error.get('type', 'an error')}: {error.get('message', '')}".rstrip(": ")
    head = (
        f"every one of the {iterations} calls failed ({what}), so there is no working step to check for leaks"
    )
    if first is not None and first.get("kind") == ASYNC_TIDY:
        return f"{head}: {first.get('text', '')}"
    if first is not None:
        return f"{head}: the step catches the error and logs it (at {first.get('site')}); fix the step, then check it"
    return head


def hints(misuse: Misuse) -> tuple[str, ...]:
    """One hint per misused ``tf.tidy()`` site (its text names the site and the fix)."""
    return tuple(str(r.get("text")) for r in misuse.records if r.get("kind") == ASYNC_TIDY and r.get("text"))
