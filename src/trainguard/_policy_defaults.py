"""The default :class:`~trainguard.runner.Policy` as the store keeps a policy (``Policy().to_dict()``).

The run report marks the policy values a run changed from these. It reads them here rather than
from ``runner.policy``, so that the report package never imports the runner (the runner hands
itself to the report). ``tests/unit/test_boundaries.py`` pins this equal to ``Policy().to_dict()``:
a field added to the policy fails that test until it is added here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["POLICY_DEFAULTS"]

POLICY_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "max_trials_per_worker": None,
        "recycle_above": None,
        "recycle_growth": None,
        "predictive": True,
        "peak_ratio": 1.2,
        "budget_counts_supervisor": None,
        "predictive_margin": 0.05,
        "min_trials_for_slope": 3,
        "memory_limit": None,
        "gpu_memory_limit": None,
        "timeout": None,
        "retries": 0,
        "retry_on": ["crash", "memory", "timeout"],
        "on_error": "continue",
        "on_oom": None,
        "max_stages_per_worker": None,
        "soft_limit": None,
        "pressure_grace": None,
        "pressure_horizon": 3.0,
        "predict_peaks": True,
    }
)
