"""Which framework unpickling a value would import, read from its pickle (no kernel, no worker)."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest

from trainguard.notebook._audit import framework_of, imported_modules

torch = pytest.importorskip("torch")


def test_plain_data_and_numpy_import_no_framework():
    for value in (1.5, [1, {"a": "torch"}], "keras", np.zeros(3), {"x": np.float32(2)}):
        assert framework_of(cloudpickle.dumps(value)) is None, value
    assert "numpy" in " ".join(imported_modules(cloudpickle.dumps(np.zeros(3))))


def test_framework_objects_are_found():
    assert framework_of(cloudpickle.dumps(torch.zeros(2))) == "torch"
    assert framework_of(cloudpickle.dumps(torch.nn.Linear(2, 2))) == "torch"
    assert framework_of(cloudpickle.dumps({"deep": [(1, torch.ones(1))]})) == "torch"


def test_a_function_by_value_that_uses_a_framework_module_is_found():
    # cloudpickle re-imports the module by name (subimport('torch')): no global names torch
    fn = eval("lambda: torch.zeros(1)", {"torch": torch})  # noqa: S307 - a function defined outside any module
    assert framework_of(cloudpickle.dumps(fn)) == "torch"
    plain = eval("lambda: math.pi", {"math": __import__("math")})  # noqa: S307
    assert framework_of(cloudpickle.dumps(plain)) is None
