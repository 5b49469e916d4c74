"""The IPython extension: ``%load_ext trainguard``, then ``%%trainguard`` cells run in a guarded worker.

::

    %load_ext trainguard

    %%trainguard --memory-limit 4GB --keras-backend torch
    model = build(units)            # `build` and `units` come from the notebook, by value
    history = model.fit(x, y).history["loss"]   # `history` comes back; `model` is named if it cannot

The cell's code runs in a warm worker (the ``@trainguard.isolated`` engine: the Runner's worker,
limits and recycling). The names it reads are sent by value (cloudpickle), checked one by one
first; the names it assigns come back into the notebook (one that cannot is named in one line,
the rest still come back; one whose unpickling would import TensorFlow, Keras, torch or JAX
into the kernel stays in the worker unless named with ``--out``); a last line that is an expression is the cell's value, shown as
``Out[n]`` (a trailing ``;`` hides it; a value that cannot come back is shown by its repr in
the worker, with a one-line note); what it prints streams into the cell while it runs; an error is an
error of the cell and leaves the notebook's variables as they were. Cells with the same options
share one warm worker.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "TrainguardMagics", "OPTIONS"]

#: the options of ``%%trainguard`` and the Runner keyword each sets
OPTIONS = {
    "--memory-limit": "memory_limit",
    "--timeout": "timeout",
    "--keras-backend": "keras_backend",
    "--threads": "threads",
    "--tree-tracking": "tree_tracking",
    "--out": "out",
}
_FLAGS = {"--fresh": "fresh"}


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%%trainguard`` cell magic (``%load_ext trainguard``)."""
    ipython.register_magics(_make_magics_class()(ipython))


def parse_options(line: str) -> dict[str, Any]:
    """``"--memory-limit 4GB --fresh"`` -> ``{"memory_limit": "4GB", "fresh": True}``.

    Raises:
        ConfigError: an unknown option (with the valid ones), or one without its value.
    """
    import shlex

    from trainguard.exceptions import ConfigError

    words = shlex.split(line)
    valid = ", ".join([*OPTIONS, *_FLAGS])
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        key, eq, inline = word.partition("=")
        if key in _FLAGS and not eq:
            out[_FLAGS[key]] = True
            i += 1
            continue
        if key not in OPTIONS:
            raise ConfigError(f"%%trainguard has no option {word!r}: the options are {valid}")
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
            i += 2
        else:
            raise ConfigError(f"%%trainguard {key} needs a value, such as {key} {_EXAMPLES[key]}")
        if key == "--out":
            out["out"] = (*out.get("out", ()), *_identifiers(value))
        else:
            out[OPTIONS[key]] = int(value) if key == "--threads" and value.isdigit() else value
    return out


def _identifiers(value: str) -> tuple[str, ...]:
    from trainguard.exceptions import ConfigError

    names = tuple(n.strip() for n in value.split(",") if n.strip())
    bad = [n for n in names if not n.isidentifier()]
    if bad or not names:
        raise ConfigError(
            f"%%trainguard --out takes variable names, such as --out model or --out model,rows; not {value!r}"
        )
    return names


_EXAMPLES = {
    "--memory-limit": "4GB",
    "--timeout": "30m",
    "--keras-backend": "torch",
    "--threads": "2",
    "--tree-tracking": "portable",
    "--out": "model",
}


def _make_magics_class() -> Any:
    from IPython.core.magic import Magics, cell_magic, magics_class

    @magics_class
    class _TrainguardMagics(Magics):
        """``%%trainguard [options]``: the cell in a guarded worker (see :mod:`trainguard.notebook`)."""

        def __init__(self, shell: Any) -> None:
            super().__init__(shell)
            self._engines: dict[tuple[tuple[str, Any], ...], Any] = {}

        @cell_magic
        def trainguard(self, line: str, cell: str) -> Any:
            from trainguard.notebook._run import run_cell_magic

            # the cell's value, as IPython shows a cell's last expression (Out[n], and `_`)
            return run_cell_magic(self.shell, self._engines, line, cell)

    return _TrainguardMagics


def __getattr__(name: str) -> Any:
    if name == "TrainguardMagics":  # IPython is imported only when the extension is used
        cls = _make_magics_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
