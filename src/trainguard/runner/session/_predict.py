"""One session's peak model: the observations it is fitted on, when it is refitted, and the
prediction each pending trial gets (cached until the next refit).

The statistics are :mod:`trainguard.runner.policy._peaks` (pure); this owner only keeps state:
the ``(params it ran with, peak)`` of every ``ok`` trial (this run's, its earlier sessions' from
the store and, with ``predict_from``, the named run's; never another run's only because it ran the
same code: :mod:`~trainguard.runner.policy._prediction_scope`), a refit when enough is new, and the
latest model's words (with the runs it was fitted on) for ``show`` and the events.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trainguard.outcomes import Failure
from trainguard.runner.policy._peaks import PeakPrediction
from trainguard.runner.policy._prediction_scope import PredictionScope

if TYPE_CHECKING:
    from trainguard.runner.policy._peak_fit import PeakFit

__all__ = ["PeakForecaster", "Predictions", "WINDOW"]

#: the newest observations a model is fitted on (older ones describe an older sweep region)
WINDOW = 1000
#: refit when this fraction more observations are new (at least one; a fit costs 30-70 ms of CPU)
REFIT_GROWTH = 0.05


class PeakForecaster:
    """Fitted peaks for one session (see the module docstring)."""

    def __init__(
        self,
        prior: Sequence[tuple[Any, int]] = (),
        *,
        prior_runs: Sequence[str] | None = None,
        run: str = "",
    ) -> None:
        """The peak model of one run's function, fed as trials finish.

        Args:
            prior: ``(params, peak_bytes)`` of stored trials, newest first: the run's own from its
                earlier sessions and, when asked, another run's (``predict_from``).
            prior_runs: the run each of ``prior`` comes from, in the same order (default: ``run``).
            run: this run's name; what :meth:`observe` learns is counted as its.
        """
        prior = list(prior)[:WINDOW]
        runs = list(prior_runs)[: len(prior)] if prior_runs is not None else []
        runs += [run] * (len(prior) - len(runs))
        self.run = run
        self._observations: deque[tuple[Any, int]] = deque(maxlen=WINDOW)
        self._observations.extend(reversed(prior))  # newest last
        self._runs: deque[str] = deque(reversed(runs), maxlen=WINDOW)  # whose each observation is
        self.prior_count = len(prior)
        self.fitted_runs: dict[str, int] = {}  # trials by run in the latest fit
        self._fit: PeakFit | PeakPrediction | None = None
        self._fitted_at = -1
        self._seen = len(self._observations)
        self.version = 0  # bumped at every refit: cached predictions older than it are stale
        self._cache: dict[int, tuple[int, PeakPrediction]] = {}
        self.surprises = 0

    @property
    def observations(self) -> int:
        return len(self._observations)

    def observe(self, params: Any, peak_bytes: int | None) -> None:
        """An ``ok`` trial ran with ``params`` and peaked at ``peak_bytes``.

        Args:
            params: the trial's params.
            peak_bytes: its measured peak (None: nothing to learn).
        """
        if peak_bytes and peak_bytes > 0:
            self._observations.append((params, int(peak_bytes)))
            self._runs.append(self.run)
            self._seen += 1

    def observe_kill(
        self, params: Any, peak_bytes: int | None, predicted: PeakPrediction | None
    ) -> str | None:
        """A trial was killed for memory at ``peak_bytes`` (a floor of where it would have gone).

        Returns a sentence when the model had predicted it to fit (the model is then refitted with
        the kill's peak as an observation), else None.

        Args:
            params: the trial's params.
            peak_bytes: the peak at the kill.
            predicted: what the model had predicted for it, if anything.

        Returns:
            The sentence, or None.
        """
        if not peak_bytes:
            return None
        self.observe(params, peak_bytes)
        if predicted is None or not predicted.known or (predicted.high_bytes or 0) >= peak_bytes:
            return None
        self.surprises += 1
        return (
            f"the peak model predicted {predicted.peak_bytes} B (at most {predicted.high_bytes} B) and the trial "
            f"was killed at {peak_bytes} B: refitting with the kill's peak"
        )

    def model(self) -> PeakFit | PeakPrediction:
        """The current model (refitted when enough observations are new).

        Returns:
            The fit, or an unknown prediction that says why there is none.
        """
        n = self._seen
        stale = self._fit is None or n - self._fitted_at >= max(1.0, self._fitted_at * REFIT_GROWTH)
        if stale:
            from trainguard.runner.policy._peak_fit import fit_peaks  # numpy: only once a model is fitted

            self._fit = fit_peaks(list(self._observations))
            self.fitted_runs = dict(Counter(self._runs))
            self._fitted_at = n
            self.version += 1
            self._cache.clear()
        assert self._fit is not None
        return self._fit

    def current(self) -> PeakFit | PeakPrediction:
        """The latest model without refitting (the first one is fitted now). A worker waiting for
        its next trial does not wait for a fit (10-70 ms of CPU): the session picks with this one
        and refits (:meth:`model`) once the worker has its trial.

        Returns:
            The fit, or an unknown prediction that says why there is none.
        """
        return self._fit if self._fit is not None else self.model()

    def predict(self, params: Any, key: int | None = None, *, refit: bool = True) -> PeakPrediction:
        """The prediction for ``params`` (``key``, a trial index, caches it until the next refit;
        ``refit=False``: with :meth:`current`'s model).

        Args:
            params: the trial's params.
            key: a trial index to cache the prediction under.
            refit: refit first when enough observations are new.

        Returns:
            The predicted peak with its 95 % interval, or unknown with the reason.
        """
        fit = self.model() if refit else self.current()
        if key is not None:
            cached = self._cache.get(key)
            if cached is not None and cached[0] == self.version:
                return cached[1]
        prediction = fit if isinstance(fit, PeakPrediction) else fit.predict(params)
        if key is not None:
            self._cache[key] = (self.version, prediction)
        return prediction

    def forget(self, key: int) -> None:
        """A trial's cached prediction is no longer needed (it started with other params).

        Args:
            key: the trial index.
        """
        self._cache.pop(key, None)

    def describe(self, *, refit: bool = True) -> dict[str, Any]:
        """The model as JSON for an event and ``show``.

        Args:
            refit: refit first when enough observations are new.

        Returns:
            The model's terms, ignored params and fit statistics as plain JSON values.
        """
        fit = self.model() if refit else self.current()
        sources = {"prior_trials": self.prior_count, "runs": dict(self.fitted_runs)}
        if isinstance(fit, PeakPrediction):
            return {"description": f"unknown: {fit.reason}", "trials": fit.trials, **sources}
        return {**fit.to_dict(), **sources}

    def sources(self) -> str:
        """Which runs' trials the latest fit was fitted on, in words (``"fitted on run 'A' (6
        trials)"``): what a prediction it makes rests on.

        Returns:
            The words.
        """
        from trainguard.runner.policy._prediction_scope import sources_words

        return sources_words(self.fitted_runs, self.run)


#: pending trials looked at when a worker picks its next one (the queue's head; a long grid is
#: taken in windows so the choice costs the same at trial 10 and at trial 100,000)
PICK_WINDOW = 64


class Predictions:
    """The session's peak predictions (``Policy(predict_peaks=...)``): which pending trial a worker
    takes, trials not started or started smaller because of their prediction, what each attempt
    records. Owns the :class:`PeakForecaster`; the loop owns the queue and asks."""

    def __init__(self, *, policy: Any, recorder: Any, fn: Any, scope: PredictionScope | None = None) -> None:
        self.policy = policy
        self.recorder = recorder
        self.fn = fn
        #: whose history the model reads (default: this run's own; see ``_prediction_scope``)
        self.scope = (
            scope if scope is not None else PredictionScope(recorder.name, None, policy.predict_peaks)
        )
        self.forecaster: PeakForecaster | None = None
        self._shape: Any = None
        self.by_index: dict[int, PeakPrediction] = {}  # what each trial's latest attempt started with
        #: another owner's refusal of a trial before it starts (the GPU budget's): its failure or None
        self.refuse: Callable[[Any], Failure | None] | None = None

    def open(self, *, budgeted: bool = False) -> None:
        """Fitted on the ``ok`` trials of the runs :attr:`scope` names: this run's own (its
        earlier sessions' with the same code) and, with ``predict_from``, that run's; never on
        another run only because it ran the same function. Only when a prediction can decide
        something (``predict_peaks`` with a ``memory_limit``, an ``on_oom`` rule or a memory
        budget): otherwise no model is fitted, so a run without limits pays nothing for it (the
        fit imports numpy into the supervisor's process, which is the user's own: a notebook
        kernel, an Optuna study)."""
        policy = self.policy
        if not (policy.predict_peaks and (policy.memory_limit or policy.on_oom is not None or budgeted)):
            return
        rows: list[tuple[float, str, Any, int]] = []
        if self.recorder.persistent and self.scope.enabled:
            rows = self._history()
        rows.sort(key=lambda row: row[0], reverse=True)  # newest first, whichever run
        self.forecaster = PeakForecaster(
            [(params, peak) for _, _, params, peak in rows],
            prior_runs=[run for _, run, _, _ in rows],
            run=self.scope.run,
        )

    def _history(self) -> list[tuple[float, str, Any, int]]:
        """``(finished_at, run, params, peak)`` of the scope's runs' ``ok`` trials in the store:
        this run's with the same code only, the named run's as they are (the user chose it)."""
        store, out = self.recorder.store, []
        for name in self.scope.runs:
            own = name == self.scope.run
            info = None if own else store.get_run(name)
            run_id = self.recorder.run_id if own else (info.run_id if info is not None else None)
            if run_id is None:
                continue  # renamed since the run began (the Runner checked that it exists)
            rows = store.run_peak_observations(run_id, fn_version=self.fn.version if own else None)
            out += [(finished, name, params, peak) for finished, params, peak in rows]
        return out

    @property
    def acting(self) -> bool:
        return bool(self.policy.predict_peaks and self.forecaster is not None)

    def predict(self, run: Any) -> PeakPrediction:
        forecaster = self.forecaster
        if forecaster is None:
            return PeakPrediction.unknown("no model in this session")
        key = None if run.attempt_params is not None else run.index
        return forecaster.predict(run.sent_params, key=key, refit=False)

    def budget_bytes(self, run: Any) -> float | None:
        """What ``run`` is expected to reach, for the memory budget: its interval's high end."""
        if not self.acting:
            return None
        prediction = self.predict(run)
        return float(prediction.high_bytes or 0) if prediction.known else None

    def over_limit(self, window: Sequence[Any]) -> list[tuple[Any, PeakPrediction]]:
        """The trials of ``window`` not to start: their whole interval over ``memory_limit`` (never
        with ``on_oom``, which starts them smaller; never one already under way)."""
        from trainguard.runner.policy._peaks import over_limit

        if not self.acting or self.policy.on_oom is not None or not self.policy.memory_limit:
            return []
        self.say_model()
        out = []
        for run in window:
            if run.attempt == 1 and run.attempt_params is None:
                prediction = self.predict(run)
                if over_limit(prediction, self.policy.memory_limit):
                    out.append((run, prediction))
        return out

    def next_run(
        self, queue: Any, room_bytes: float | None, not_started: Callable[[Any, Failure], bool]
    ) -> Any | None:
        """The pending trial a worker takes next, left in ``queue``: the trials of the queue's
        head predicted over the memory limit are taken out and ended through ``not_started``
        (which says whether the run goes on); under a budget (``room_bytes`` left) the largest
        predicted to fit is taken, else the first. None when nothing is left to take."""
        while queue:
            window = [queue[i] for i in range(min(PICK_WINDOW, len(queue)))]
            skipped = self.over_limit(window)
            for run, prediction in skipped:
                queue.remove(run)
                if not not_started(run, self.skipped(run, prediction)):
                    return None
            refused = self.refused(window) if not skipped else []
            for run, error in refused:
                queue.remove(run)
                if not not_started(run, error):
                    return None
            if not skipped and not refused:
                return self.pick(window, room_bytes)
        return None

    def refused(self, window: Sequence[Any]) -> list[tuple[Any, Failure]]:
        """The trials of ``window`` that :attr:`refuse` does not let start, each recorded."""
        if self.refuse is None:
            return []
        out = []
        for run in window:
            error = self.refuse(run)
            if error is not None:
                self.recorder.event(
                    "peak_skip",
                    f"trial {run.index} {error.message}",
                    data=None if error.prediction is None else dict(error.prediction),
                    index=run.index,
                )
                out.append((run, error))
        return out

    def pick(self, window: Sequence[Any], room_bytes: float | None) -> Any:
        """The trial of ``window`` a worker takes: under a budget (``room_bytes`` left), the largest
        predicted that fits; else the first."""
        from trainguard.runner.policy._peaks import pick_for_budget

        if room_bytes is None or not self.acting:
            return window[0]
        self.say_model()
        return window[pick_for_budget([self.predict(run) for run in window], room_bytes)]

    def say_model(self) -> None:
        """An event when the model's shape changes (first known, another set of params)."""
        if self.forecaster is None:
            return
        described = self.forecaster.describe(refit=False)
        words = described.get("description")
        shape = (tuple(described.get("features", ())), described.get("flat"), "unknown" in str(words))
        if shape == self._shape:
            return
        self._shape = shape
        ignored = described.get("ignored") or {}
        note = "; ignored: " + ", ".join(f"{k} ({v})" for k, v in sorted(ignored.items())) if ignored else ""
        sources = self.forecaster.sources()
        self.recorder.event("peak_model", f"peak model: {words}{note}; {sources}", data=described)

    def skipped(self, run: Any, prediction: PeakPrediction) -> Failure:
        """Record a trial not started for its prediction; returns its failure."""
        from trainguard.runner.policy._peaks import not_started_message
        from trainguard.units import format_bytes

        limit = self.policy.memory_limit
        if self.forecaster is not None:  # which runs' trials predicted it, in the words it is kept with
            runs = dict(self.forecaster.fitted_runs)
            prediction = dataclasses.replace(
                prediction, reason=f"{prediction.reason}; {self.forecaster.sources()}"
            )
        else:
            runs = {}
        message = not_started_message(prediction, f"memory_limit={format_bytes(limit)}")
        self.record(run, prediction, "skipped")
        self.recorder.event(
            "peak_skip",
            f"trial {run.index} {message}",
            data={**prediction.to_dict(), "limit_bytes": limit, "runs": runs},
            index=run.index,
        )
        return Failure("predicted_over_limit", message, prediction={**prediction.to_dict(), "runs": runs})

    def apply_size(self, run: Any) -> None:
        """With ``on_oom=Shrink(...)``: start a trial predicted not to fit at the largest size of
        the rule's steps that is predicted to."""
        from trainguard.runner.policy._peaks import shrunk_to_fit

        rule, limit = self.policy.on_oom, self.policy.memory_limit
        forecaster = self.forecaster
        if rule is None or not limit or not self.acting or forecaster is None:
            return
        if run.attempt != 1 or run.attempt_params is not None:
            return  # a trial already under way (resumed, retried, shrunk after an OOM) keeps its size
        found = shrunk_to_fit(
            rule,
            run.sent_params,
            lambda params: forecaster.predict(params, refit=False),
            limit,
            self.policy.predictive_margin,
        )
        if found is None:
            return
        params, prediction = found
        before = run.sent_params.get(rule.key)
        run.attempt_params = dict(params)
        self.recorder.event(
            "peak_start",
            f"trial {run.index} starts at {rule.key}={params[rule.key]} instead of {before}: predicted peak "
            f"{prediction.peak_bytes} B fits memory_limit={limit} B ({prediction.reason})",
            data={"key": rule.key, "size": params[rule.key], "from": before, **prediction.to_dict()},
            index=run.index,
        )
        run.predicted_size = True

    def refit(self) -> None:
        """Refit the model when enough is new: the loop calls this after giving idle workers their
        trials, so no worker waits for a fit (the picks use the model fitted one round earlier)."""
        if self.forecaster is not None:
            self.forecaster.model()

    def started(self, run: Any) -> None:
        """An attempt started: its prediction is recorded with it."""
        if self.forecaster is not None:
            self.record(run, self.predict(run), "shrunk" if run.predicted_size else None)

    def record(self, run: Any, prediction: PeakPrediction, acted: str | None) -> None:
        self.by_index[run.index] = prediction
        if self.recorder.run_id is not None and self.forecaster is not None:
            self.recorder.store.record_prediction(
                self.recorder.run_id, run.index, run.attempt, run.sent_params, prediction.to_dict(), acted
            )

    def predicted_peak_bytes(self, index: int) -> int | None:
        prediction = self.by_index.get(index)
        return prediction.peak_bytes if prediction is not None else None

    def observe(self, run: Any, status: str, peak: int | None, worker: Any) -> None:
        """Feed the model what a finished attempt measured; say so when a kill was not foreseen."""
        if self.forecaster is None:
            return
        if status == "ok":
            self.forecaster.observe(run.sent_params, peak)
        elif status in ("killed_memory", "os_oom"):
            surprise = self.forecaster.observe_kill(run.sent_params, peak, self.by_index.get(run.index))
            if surprise is not None:
                self.recorder.event(
                    "peak_wrong", f"trial {run.index}: {surprise}", worker=worker, index=run.index
                )
