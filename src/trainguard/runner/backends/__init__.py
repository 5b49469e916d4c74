"""Where workers run: the public backend contract and the two backends that implement it.

- :mod:`~trainguard.runner.backends.base`: :class:`BaseBackend` / :class:`BaseWorker`, the
  contract (its docstring) a new backend implements.
- :mod:`~trainguard.runner.backends.local`: workers as child processes of the supervisor.
- :mod:`~trainguard.runner.backends.ray`: each worker hosted by a Ray actor on its node (imports
  ray only when used).
"""

from __future__ import annotations

from trainguard.runner.backends.base import BaseBackend, BaseWorker, Inbox, WorkerSpec

__all__ = ["BaseBackend", "BaseWorker", "Inbox", "WorkerSpec"]
