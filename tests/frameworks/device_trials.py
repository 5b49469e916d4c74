"""One trial for test_device_and_fragmentation: oom_trials' device_view and then its tf_allocates in
the same worker, so the device settings and the fragmentation figures cost one TensorFlow start
(about 10 CPU seconds) instead of two. Loaded by workers as a file reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).parent.parent / "integration" / "oom_trials.py"


def _oom_trials():
    spec = importlib.util.spec_from_file_location("trainguard_test_oom_trials", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def view_then_allocate(params):
    """What the trial sees of its device settings, then a TensorFlow allocation peak (``n``)."""
    trials = _oom_trials()
    return {**trials.device_view(params), "total": trials.tf_allocates(params)}
