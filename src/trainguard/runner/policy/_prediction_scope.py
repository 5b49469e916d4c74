"""Which runs' history a run's peak model is fitted on, pure: the decision and its words.

The peak model (:mod:`trainguard.runner.policy._peaks`) can keep a trial from starting, so what it
is fitted on is a setting of the run, never a side effect of what else the store holds. By
default a run's model learns from that run alone: its own ``ok`` trials, from every session of it
(a resume keeps what the earlier sessions measured). Another run of the same function in the same
store may have run with what the params do not show (another dtype, another model, another
machine); its peaks say nothing of this run's until the user says they do, with
``predict_from="other-run"`` (``--predict-from``), which adds that run's ``ok`` trials to the
model's first fit. ``Policy(predict_peaks=False)`` (``--no-predict``) fits no model at all.

Everything here is pure: names and counts in, a decision or a ConfigError out; the Runner asks the
store for the names, the session for the counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainguard.exceptions import ConfigError

__all__ = ["PredictionScope", "prediction_scope", "sources_words", "NAMES_SHOWN"]

#: the stored run names an unknown ``predict_from`` lists (the newest), so the line stays one line
NAMES_SHOWN = 5


@dataclass(frozen=True, slots=True)
class PredictionScope:
    """The runs whose ``ok`` trials a run's peak model is fitted on.

    Attributes:
        run: the run's own name (its earlier sessions included).
        predict_from: another run of the store whose history seeds the model, or None.
        enabled: False when the run fits no model (``predict_peaks=False``).
    """

    run: str
    predict_from: str | None = None
    enabled: bool = True

    @property
    def runs(self) -> tuple[str, ...]:
        """The names whose history is read, the run's own first (empty when disabled)."""
        if not self.enabled:
            return ()
        if self.predict_from is None or self.predict_from == self.run:
            return (self.run,)
        return (self.run, self.predict_from)


def prediction_scope(
    run: str,
    predict_from: object,
    *,
    predict_peaks: bool,
    store: str | None,
    stored_runs: Sequence[str] = (),
) -> PredictionScope:
    """Decide which runs' history ``run``'s peak model reads, or refuse ``predict_from`` in one line.

    Args:
        run: the run's name.
        predict_from: the run named to seed the model (None: the run's own history only).
        predict_peaks: the policy's ``predict_peaks`` (False: no model).
        store: the store's path as the user gave it (None: the run has no store).
        stored_runs: the names of the runs in that store, oldest first (read only when
            ``predict_from`` is given).

    Returns:
        The scope.

    Raises:
        ConfigError: ``predict_from`` is not a non-empty string, is given with ``predict_peaks``
            False or without a store, or names no run of the store.
    """
    if predict_from is None:
        return PredictionScope(run, None, predict_peaks)
    if not isinstance(predict_from, str) or not predict_from.strip():
        raise ConfigError(
            f"predict_from must name a run of the store, such as 'sweep1', not {predict_from!r}"
        )
    if not predict_peaks:
        raise ConfigError(
            f"predict_from={predict_from!r} seeds the peak model and Policy(predict_peaks=False) turns it "
            "off: give one of them"
        )
    if store is None:
        raise ConfigError(
            f"predict_from={predict_from!r} reads that run's trials from the store, and this runner has "
            "none: pass store='runs.db'"
        )
    if predict_from not in stored_runs:
        names = list(stored_runs)
        if names:
            more = f" and {len(names) - NAMES_SHOWN} older" if len(names) > NAMES_SHOWN else ""
            hint = "its runs: " + ", ".join(repr(n) for n in names[-NAMES_SHOWN:]) + more
        else:
            hint = "it has no runs yet"
        raise ConfigError(
            f"predict_from={predict_from!r} is not a run in {store} ({hint}): "
            f"`trainguard runs --store {store}` lists them"
        )
    return PredictionScope(run, predict_from, True)


def sources_words(counts: Mapping[str, int], run: str) -> str:
    """Which runs' trials a model was fitted on, in words: ``"fitted on run 'A' (6 trials) and
    this run (2)"``.

    Args:
        counts: trials by run name, as fitted.
        run: this run's name (said as "this run").

    Returns:
        The words ("no trials yet" when there are none).
    """
    parts = []
    for name, n in sorted(counts.items(), key=lambda item: (item[0] != run, item[0])):
        if n <= 0:
            continue
        who = "this run" if name == run else f"run {name!r}"
        parts.append(f"{who} ({n} trial{'s' if n != 1 else ''})")
    if not parts:
        return "no trials yet"
    return "fitted on " + (" and ".join(parts) if len(parts) <= 2 else ", ".join(parts))
