"""Optuna studies guarded by trainguard: every objective call in a supervised, recycled worker.

::

    import optuna
    import trainguard.optuna

    study = optuna.create_study(direction="minimize")
    trainguard.optuna.optimize(study, objective, n_trials=30, policy=trainguard.Policy(memory_limit="4GB"))
    # or, as a drop-in:
    study.optimize(trainguard.optuna.isolated(objective), n_trials=30)

    # configs whose measured peak is over 4 GB become infeasible for the sampler:
    sampler = optuna.samplers.TPESampler(constraints_func=trainguard.optuna.memory_constraints("4GB"))
    # memory as a second objective: values are (objective, peak bytes)
    study = optuna.create_study(directions=["minimize", "minimize"])
    trainguard.optuna.optimize(study, objective, n_trials=30, memory_objective=True)

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
    memory_constraints,
    optimize,
)

__all__ = [
    "optimize",
    "isolated",
    "default_policy",
    "memory_constraints",
    "IsolatedObjective",
    "TrialProxy",
    "ATTR_PREFIX",
]
