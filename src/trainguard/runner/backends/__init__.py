"""Where workers run: the public backend contract and the backends that implement it.

- :mod:`~trainguard.runner.backends.typed`: :class:`RayBackend` and :class:`SlurmBackend`, the
  typed settings ``Runner(backend=...)`` takes (frozen, checked when made), and the resolution of
  ``backend=`` into the running backend.
- :mod:`~trainguard.runner.backends.base`: :class:`BaseBackend` / :class:`BaseWorker`, the
  contract (its docstring) a new backend implements.
- :mod:`~trainguard.runner.backends.local`: workers as child processes of the supervisor.
- :mod:`~trainguard.runner.backends.ray`: each worker hosted by a Ray actor on its node (imports
  ray only when used).
- :mod:`~trainguard.runner.backends.slurm`: workers in pilot jobs on a Slurm cluster, each pilot
  (:mod:`~trainguard.runner.backends.slurm_pilot`) hosting them with the Ray backend's slot agent;
  its pure decisions in :mod:`~trainguard.runner.backends.slurm_rules` (imports submitit only when used).
"""

from __future__ import annotations

from trainguard.runner.backends.base import BaseBackend, BaseWorker, Inbox, WorkerSpec
from trainguard.runner.backends.typed import RayBackend, SlurmBackend

__all__ = ["BaseBackend", "BaseWorker", "Inbox", "WorkerSpec", "RayBackend", "SlurmBackend"]
