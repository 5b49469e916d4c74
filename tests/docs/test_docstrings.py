"""Every public callable's docstring says what it takes, returns and raises (Google style).

What "public" and "complete" mean is in tests/docs/public_api.py: the names in ``__all__`` of the
public modules, their classes' constructors and public methods; ``Args:`` for every parameter,
``Returns:`` when something is returned, ``Raises:`` when the body raises. The reference pages are
generated from these docstrings, so a gap here is a gap in the reference.
"""

from __future__ import annotations

import textwrap

import pytest
from public_api import check_callable, findings, public_objects


def test_every_public_callable_documents_args_returns_raises() -> None:
    gaps = [str(f) for f in findings()]
    assert not gaps, "public callables whose docstrings lack a section:\n" + "\n".join(gaps)


def test_the_public_surface_is_all_there() -> None:
    names = {name for name, _ in public_objects()}
    for expected in (
        "trainguard.Runner",
        "trainguard.leakcheck",
        "trainguard.scope",
        "trainguard.optuna.optimize",
        "trainguard.keras.MemoryCallback",
        "trainguard.parse_size",
        "trainguard.units.format_duration",
    ):
        assert expected in names


def _undocumented(x: int, *, limit: str | None = None) -> int:
    """Twice ``x``."""
    if x < 0:
        raise ValueError("x < 0")
    return 2 * x


def _documented(x: int, *, limit: str | None = None) -> int:
    """Twice ``x``.

    Args:
        x: a number.
        limit: unused.

    Returns:
        2x.

    Raises:
        ValueError: x is negative.
    """
    if x < 0:
        raise ValueError("x < 0")
    return 2 * x


@pytest.mark.parametrize(
    ("fn", "missing"),
    [(_undocumented, ["Args: x, limit", "Returns", "Raises"]), (_documented, [])],
)
def test_the_check_finds_each_missing_section(fn, missing) -> None:
    assert check_callable(fn.__name__, fn, textwrap.dedent(fn.__doc__ or "")) == missing
