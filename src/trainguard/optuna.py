"""Optuna studies guarded by trainguard: every objective call in a supervised, recycled worker.

::

    import optuna
    import trainguard.optuna

    study = optuna.create_study(direction="minimize")
    trainguard.optuna.optimize(study, objective, n_trials=30, policy=trainguard.Policy(memory_limit="4GB"))
    # or, as a drop-in:
    study.optimize(trainguard.optuna.isolated(objective), n_trials=30)

Importing this module does not import optuna; using it without optuna installed raises
``MissingDependencyError`` naming ``pip install -e '.[optuna]'``.
"""

from __future__ import annotations

from trainguard.integrations.optuna import (
    ATTR_PREFIX,
    IsolatedObjective,
    TrialProxy,
    default_policy,
    isolated,
    optimize,
)

__all__ = ["optimize", "isolated", "default_policy", "IsolatedObjective", "TrialProxy", "ATTR_PREFIX"]
