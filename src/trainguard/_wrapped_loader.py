"""An import loader that runs the real one inside something of its own: the base of the loaders
that quiet a framework's import (``frameworks/_quiet.py``) and that seed a framework as a trial
imports it (``runner/worker/seeding.py``). ``create_module`` and every other attribute are the
real loader's; a subclass writes ``exec_module``."""

from __future__ import annotations

import importlib.abc
from typing import Any

__all__ = ["WrappedLoader"]


class WrappedLoader(importlib.abc.Loader):
    """Holds the real loader as ``_loader`` and hands it everything but ``exec_module``."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
