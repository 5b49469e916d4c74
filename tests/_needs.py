"""``needs(*modules)``: skip a test module whose framework is not installed, without importing it.

``pytest.importorskip`` imports the module, so collecting the suite imported TensorFlow, Keras,
torch and JAX in every test process (about 20 of its 25 CPU seconds of collection), whether that
process's tests used them in-process or only in the workers and subprocesses they start. A test
that uses one in-process imports it itself, when it runs."""

from __future__ import annotations

import importlib.util

import pytest


def needs(*modules: str) -> None:
    """Skip the calling test module when any of ``modules`` cannot be found (call it at module level)."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (not installed)", allow_module_level=True)
