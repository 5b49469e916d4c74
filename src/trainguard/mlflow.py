"""trainguard runs in MLflow: one MLflow run per trial (params, its result's numbers,
``peak_rss_bytes``, ``growth_bytes``, ``duration_s``, status, worker) under one parent run.

::

    import trainguard.mlflow
    parent_id = trainguard.mlflow.export("sweep1", store="trainguard.db", to="mlruns")

or ``trainguard export sweep1 --to mlflow --tracking-uri mlruns``. Importing this module does not
import mlflow; exporting without it raises ``MissingDependencyError`` naming
``pip install -e '.[mlflow]'``.
"""

from __future__ import annotations

from trainguard.integrations.mlflow_export import export, tracking_uri

__all__ = ["export", "tracking_uri"]
