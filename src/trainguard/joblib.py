"""joblib (and so scikit-learn) tasks in guarded, recycled trainguard workers.

::

    import joblib
    import trainguard.joblib
    from sklearn.model_selection import GridSearchCV

    trainguard.joblib.register()
    with joblib.parallel_backend("trainguard", n_jobs=2, memory_limit="4GB"):
        search = GridSearchCV(estimator, grid, cv=5).fit(X, y)

Every task (one fold's fit and score, one grid point) runs in a supervised worker process that is
reused, recycled by the policy, and killed at its limits, also with ``n_jobs=1``. A fit whose
worker was killed fails as scikit-learn expects a fit to fail: ``error_score`` applies.

Options of ``parallel_backend("trainguard", ...)``: ``memory_limit`` and ``timeout`` (one task's),
or ``policy=trainguard.Policy(...)``; ``memory_budget`` (all workers together) and
``workers="auto"``; ``n_jobs=-1`` runs as many workers as the budget (or the per-task limit)
allows, not one per core, and says so once; ``gpus`` (default ``"auto"``: every GPU NVML sees,
one per worker slot round robin, when there are several); ``store`` and ``name`` to keep the
tasks' history; any other :class:`trainguard.Runner` keyword (``keras_backend``, ``preload``...).

A finished call's workers stay warm for the next call with the same options (as loky keeps its
workers) and end after 5 minutes idle, at exit, or at :func:`shutdown`.

Importing this module does not import joblib; :func:`register` without scikit-learn installed
raises ``MissingDependencyError`` naming ``pip install -e '.[sklearn]'``.
"""

from __future__ import annotations

from trainguard.exceptions import missing

__all__ = ["register", "shutdown", "BACKEND_NAME"]

#: The name to give ``joblib.parallel_backend``.
BACKEND_NAME = "trainguard"


def register() -> None:
    """Register joblib's ``"trainguard"`` backend (idempotent).

    Raises:
        MissingDependencyError: scikit-learn (and so joblib) is not installed.
    """
    try:
        import joblib  # noqa: F401
    except ImportError as err:
        raise missing("scikit-learn", "trainguard.joblib", extra="sklearn") from err
    from trainguard.integrations.joblib_backend import register as register_backend

    register_backend()


def shutdown() -> None:
    """End the workers a finished ``Parallel`` call left warm for the next one, now (as
    ``loky.get_reusable_executor().shutdown()`` does for loky's); a later call starts new ones.
    Idempotent; does nothing when no pool is kept.
    """
    import sys

    warm = sys.modules.get("trainguard.integrations._warm_pools")
    if warm is not None:
        warm.close_kept()
