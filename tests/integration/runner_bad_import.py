"""A trial module whose import fails in the worker (used to test the one-line load error)."""

import trainguard_module_that_does_not_exist  # noqa: F401


def train(params):
    return {}
