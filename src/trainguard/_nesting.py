"""Refuse to start a Runner or a leak check inside a trainguard worker or leak-check process.

A worker imports the user's file to find the trial function, as multiprocessing's spawn imports
``__main__``; a file that starts a ``Runner`` at module level (no ``if __name__ == "__main__":``
guard) would start one in every worker, which starts workers that import the file again: hundreds
of processes and nothing printed. The worker and the leak-check child declare their role here at
start-up; :func:`refuse_nested` turns a nested start into one :class:`ConfigError` naming the guard
to add, before any process starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from trainguard.exceptions import ConfigError

__all__ = ["set_role", "importing", "refuse_nested", "role"]

_role: str | None = None
_importing: str | None = None


def set_role(name: str) -> None:
    """Declare that this process is a trainguard ``name`` ("worker", "leak-check process")."""
    global _role
    _role = name


def role() -> str | None:
    return _role


@contextmanager
def importing(path: str) -> Iterator[None]:
    """Mark the import of the user's ``path`` (so the error can name the file)."""
    global _importing
    previous, _importing = _importing, path
    try:
        yield
    finally:
        _importing = previous


def refuse_nested(what: str) -> None:
    """Raise when called inside a trainguard worker or leak-check process.

    Raises:
        ConfigError: one line that names the ``if __name__ == "__main__":`` guard to add.
    """
    if _role is None:
        return
    if _importing is not None:
        raise ConfigError(
            f"{_importing} starts a {what} when it is imported, and a trainguard {_role} imports it to "
            f"find your function: put the code that starts the {what} under "
            f'`if __name__ == "__main__":` in {_importing}',
            nested=True,
        )
    raise ConfigError(
        f"a {what} cannot start inside a trainguard {_role} (it would start processes from every "
        f'trial): start it from your main script, under `if __name__ == "__main__":`',
        nested=True,
    )
