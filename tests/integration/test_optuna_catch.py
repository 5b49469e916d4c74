"""Optuna's ``catch=`` with the objective's own exception types, through ``optimize`` and
``isolated`` (issue 23, item 13): in-process such a type is caught; so it must be here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")
sys.path.insert(0, str(Path(__file__).parent))

from optuna_objectives import BatchTooBig, raises_custom  # noqa: E402

import trainguard.optuna as tgo  # noqa: E402

TS = optuna.trial.TrialState
HERE = Path(__file__).parent


def _study():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))


def test_catch_with_a_user_defined_type_goes_on_as_in_process():
    study = _study()
    for kind in ("big", "huge"):  # the type itself and a subclass of it
        study.enqueue_trial({"kind": kind})
    tgo.optimize(study, raises_custom, n_trials=2, catch=(BatchTooBig,))
    assert [t.state for t in study.trials] == [TS.FAIL, TS.FAIL]
    with tgo.isolated(raises_custom) as objective:
        study.enqueue_trial({"kind": "big"})
        study.optimize(objective, n_trials=1, catch=(BatchTooBig,))
    assert len(study.trials) == 3 and study.trials[-1].state == TS.FAIL


def test_a_file_ref_objective_is_caught_by_the_classes_catch_names():
    study = _study()
    study.enqueue_trial({"kind": "huge"})
    tgo.optimize(study, f"{HERE / 'optuna_objectives.py'}:raises_custom", n_trials=1, catch=(BatchTooBig,))
    assert study.trials[-1].state == TS.FAIL
    study.enqueue_trial({"kind": "big"})
    with pytest.raises(Exception, match="batch 512 does not fit"):  # not caught: it stops the study
        tgo.optimize(study, raises_custom, n_trials=1)
