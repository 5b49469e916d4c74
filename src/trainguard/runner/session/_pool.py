"""The pool's shape during a run: how many workers, how many threads each, and the memory budget.

The decisions are the pure functions of :mod:`trainguard.runner.policy` (``budget_workers``,
``decide_budget``, ``should_prestart``, ``choose_threads``); this module keeps what they are fed
(per-trial peaks of fresh workers, trial durations by thread count) for one session, and says what
changed so the supervisor can record it with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainguard.runner.policy import BudgetDecision, budget_workers, choose_threads

__all__ = ["PoolPlanner", "ThreadChoice"]

#: trials (after each worker's first) measured per thread count before the choice is made
THREAD_SAMPLES = 3


@dataclass(slots=True)
class ThreadChoice:
    """Threads per worker, chosen by measurement when the user did not set them.

    For ``k`` workers on ``cores`` cores the candidates are ``cores // k`` (no core shared) and, when
    different, ``cores`` (each worker may use every core, as a plain process does). Workers started
    while a choice is open run the first candidate until it has :data:`THREAD_SAMPLES` timed trials
    (each worker's first trial, which pays the framework import, is left out), then one worker at
    a time runs the second; the faster median wins and every later worker gets it. With no worker
    started after the first candidate is measured (no recycling), the first candidate stays, and
    :meth:`unresolved` says so.
    """

    cores: int
    explicit: int | None = None
    samples: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    chosen: dict[int, int] = field(default_factory=dict)

    def candidates(self, workers: int) -> tuple[int, ...]:
        base = max(1, self.cores // max(1, workers))
        return (base,) if base == self.cores else (base, self.cores)

    def for_new_worker(self, workers: int, live_threads: Sequence[int] = ()) -> int:
        """Threads for a worker starting now among ``workers``; ``live_threads`` are the settings of
        the workers alive now: one worker at a time measures the alternative, so a generation of
        replacements started together does not all run the setting that may be the slower."""
        if self.explicit is not None:
            return self.explicit
        if workers in self.chosen:
            return self.chosen[workers]
        options = self.candidates(workers)
        for threads in options:
            if len(self.samples.get((workers, threads), ())) < THREAD_SAMPLES:
                if threads != options[0] and threads in live_threads:
                    return options[0]  # another worker is measuring it now
                return threads
        return options[0]

    def unresolved(self, used: Sequence[tuple[int, int]]) -> list[str]:
        """For each ``(workers, threads)`` a session ran with and left unchosen, why it stayed."""
        out = []
        for workers in sorted({w for w, _ in used}):
            options = self.candidates(workers)
            if self.explicit is not None or workers in self.chosen or len(options) < 2:
                continue
            counts = {t: len(self.samples.get((workers, t), ())) for t in options}
            out.append(
                f"{options[0]} thread{'s' if options[0] != 1 else ''} per worker with {workers} workers "
                f"(cores // workers), not compared with {options[1]}: timed trials "
                + ", ".join(f"{t} thread{'s' if t != 1 else ''}: {n}" for t, n in counts.items())
                + f" (each needs {THREAD_SAMPLES}; the other setting is tried by a worker started after the first is measured)"
            )
        return out

    def observe(self, workers: int, threads: int, duration_s: float) -> BudgetDecision | None:
        """One timed trial (not a worker's first) of a worker started with ``threads`` among
        ``workers``; returns the choice when this trial completes the measurement."""
        if self.explicit is not None or workers in self.chosen:
            return None
        options = self.candidates(workers)
        if len(options) < 2 or threads not in options:
            return None
        self.samples.setdefault((workers, threads), []).append(duration_s)
        measured = {t: self.samples.get((workers, t), []) for t in options}
        decision = choose_threads(workers, measured, min_samples=THREAD_SAMPLES)
        if decision is not None:
            self.chosen[workers] = decision.values["threads"]
        return decision


class PoolPlanner:
    """One session's pool: worker count under the memory budget (or the fixed count), threads."""

    def __init__(
        self, *, max_workers: int, budget_bytes: int | None, cores: int, threads: int | None
    ) -> None:
        self.max_workers = max_workers
        self.budget_bytes = budget_bytes
        self.threads = ThreadChoice(cores=cores, explicit=threads)
        self.fresh_peaks: list[int] = []
        self.spare_bytes: int | None = None
        self.target = max_workers if budget_bytes is None else 1
        # the most workers at once after a kill at the budget: later measurements do not raise it
        self.cap: int | None = None
        self._last_reason: str | None = None

    @property
    def budgeted(self) -> bool:
        return self.budget_bytes is not None

    @property
    def fresh_peak_bytes(self) -> int | None:
        return max(self.fresh_peaks) if self.fresh_peaks else None

    def initial(self) -> BudgetDecision | None:
        """The concurrency to start with (recorded once), under a budget."""
        if self.budget_bytes is None:
            return None
        decision = budget_workers(self.budget_bytes, self.max_workers, None)
        self.target = decision.values["workers"]
        self._last_reason = decision.message
        return decision

    def first_trial_done(self, peak_bytes: int, rss_after_bytes: int) -> BudgetDecision | None:
        """A fresh worker's first trial ended: its peak sizes the pool; a change is returned."""
        if peak_bytes <= 0:
            return None
        self.fresh_peaks.append(int(peak_bytes))
        if self.spare_bytes is None or rss_after_bytes < self.spare_bytes:
            self.spare_bytes = int(rss_after_bytes)
        if self.budget_bytes is None:
            return None
        decision = budget_workers(
            self.budget_bytes, min(self.max_workers, self.cap or self.max_workers), self.fresh_peak_bytes
        )
        workers = decision.values["workers"]
        if workers == self.target and len(self.fresh_peaks) > 1:
            return None  # the first measurement is always recorded, even when it changes nothing
        previous, self.target = self.target, workers
        return BudgetDecision(decision.action, decision.message, {**decision.values, "previous": previous})

    def lower_after_kill(self, workers: int, why: str) -> BudgetDecision | None:
        """A worker was killed at the budget with ``workers`` others still running trials: run at
        most that many (at least 1) from now on, so the run does not cross the budget again."""
        workers = max(1, min(workers, self.target))
        self.cap = workers if self.cap is None else min(self.cap, workers)
        if workers == self.target:
            return None
        previous, self.target = self.target, workers
        return BudgetDecision(
            "workers",
            f"{workers} worker{'s' if workers != 1 else ''} from now on, {previous} before: {why}",
            {"workers": workers, "previous": previous, "cap": self.cap, "budget_bytes": self.budget_bytes},
        )

    def spare_ready(self, rss_bytes: int | None) -> None:
        """A replacement started early is ready: its size is what the next one will take."""
        if rss_bytes:
            self.spare_bytes = int(rss_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_bytes": self.budget_bytes,
            "max_workers": self.max_workers,
            "target": self.target,
            "cap": self.cap,
            "fresh_peak_bytes": self.fresh_peak_bytes,
            "threads_chosen": dict(self.threads.chosen),
        }
