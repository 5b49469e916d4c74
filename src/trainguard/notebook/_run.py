"""``%%trainguard``'s work in the kernel: check, send, run, bring names back (kernel side)."""

from __future__ import annotations

import ast
import sys
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["run_cell_magic"]

_CELL_REF = "trainguard.notebook._cell:run_cell"


def _engine(engines: dict[tuple[tuple[str, Any], ...], Any], options: dict[str, Any]) -> Any:
    from trainguard.guarded import make_policy

    fresh = options.pop("fresh", False)
    key = tuple(sorted(options.items()))
    engine = engines.get(key)
    if engine is not None and fresh:
        engine.close()
        engine = None
    if engine is None:
        from trainguard.guarded import GuardedCalls

        runner_options = dict(options)
        policy, timeout_s = make_policy(
            None, runner_options.pop("memory_limit", None), runner_options.pop("timeout", None)
        )
        engine = GuardedCalls(
            _CELL_REF,
            what="the cell",
            policy=policy,
            timeout_s=timeout_s,
            name="notebook-cell",
            **runner_options,
        )
        engines[key] = engine
    return engine


def _fail(message: str) -> None:
    from IPython.core.error import UsageError

    raise UsageError(message)


def run_cell_magic(shell: Any, engines: dict[tuple[tuple[str, Any], ...], Any], line: str, cell: str) -> Any:
    """Run ``cell`` in its guarded worker; the cell's value (IPython shows it as ``Out[n]``), or None."""
    import cloudpickle

    from trainguard.guarded import pickle_inputs
    from trainguard.notebook import parse_options
    from trainguard.notebook._names import cell_names, shows_last_value

    try:
        options = parse_options(line)
    except ConfigError as err:
        _fail(str(err))
    out = tuple(options.pop("out", ()))
    source = shell.transform_cell(cell)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        shell.showsyntaxerror()
        return None
    magic = ipython_line(cell, tree)
    if magic is not None:
        _fail(magic)
    read, assigned = cell_names(tree)
    user_ns = shell.user_ns
    inputs = {name: user_ns[name] for name in sorted(read) if name in user_ns}
    try:
        inputs_pickled = pickle_inputs(inputs, "cell")  # one line naming what cannot go, before anything runs
        engine = _engine(engines, options)
    except ConfigError as err:
        _fail(str(err))
    filename = f"<trainguard cell {shell.execution_count}>"
    show_value = shows_last_value(source, tree)
    payload = cloudpickle.dumps(((source, filename, inputs_pickled, assigned, show_value, out), {}))
    try:
        values, not_returned, shown, notes = engine.call(payload)
    except Exception as err:  # noqa: BLE001
        # the cell's own exception as the same type, or the worker killed (memory, timeout) or
        # crashed: the cell fails with it, and the notebook's variables are as they were
        raise err.with_traceback(None) from None
    _bring_back(user_ns, values, not_returned)
    _say_notes(notes)
    return cell_value(user_ns, shown)


def _say_notes(notes: dict[str, Any]) -> None:
    """One line for what stayed in the worker on purpose, one for inputs changed only there."""
    held: dict[str, str] = notes.get("held", {})
    if held:
        listed = "; ".join(f"{name} ({what})" for name, what in held.items())
        names = ",".join(held)
        print(
            f"kept in the worker, so that the notebook does not load the framework: {listed}; "
            f"to bring it here, run the cell as %%trainguard --out {names}",
            file=sys.stderr,
        )
    changed: list[str] = notes.get("changed", [])
    if changed:
        names = ", ".join(changed)
        print(
            f"changed in place in the worker only, the notebook's copy is as it was: {names}; "
            f"assign it in the cell ({changed[0]} = ...) or run the cell as "
            f"%%trainguard --out {','.join(changed)} to bring the change back",
            file=sys.stderr,
        )


def ipython_line(cell: str, tree: ast.Module) -> str | None:
    """The one-line error for an IPython line (``%time ...``, ``!ls``, ``x?``) in the cell, which
    IPython turns into ``get_ipython()`` calls that a worker, with no IPython, cannot run."""
    lines = cell.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "get_ipython":
            number = node.lineno
            text = lines[number - 1].strip() if 0 < number <= len(lines) else "get_ipython()"
            return (  # the cell's line numbers count its %%trainguard line
                f"line {number + 1} of the %%trainguard cell, {text!r}, is IPython syntax (a magic, "
                "! or ?), and the cell runs in a worker without IPython: move that line to a cell "
                "of its own, or write it in Python"
            )
    return None


def _bring_back(user_ns: dict[str, Any], values: dict[str, bytes], not_returned: dict[str, str]) -> None:
    import cloudpickle

    for name, data in values.items():
        try:
            user_ns[name] = cloudpickle.loads(data)
        except Exception as err:  # noqa: BLE001 - a class the kernel cannot import, say
            not_returned[name] = f"it cannot be rebuilt in the notebook ({type(err).__name__}: {err})"
    if not_returned:
        listed = "; ".join(f"{name} ({why})" for name, why in not_returned.items())
        print(f"not returned: {listed}", file=sys.stderr)


class WorkerRepr:
    """A cell's value that could not come back, shown by the repr the worker computed."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


def cell_value(user_ns: dict[str, Any], shown: dict[str, Any] | None) -> Any:
    """The cell's value in the notebook from what the worker sent (see ``_cell``); a value that
    cannot be had is said in one line on stderr, and a repr stands in for one that could not come."""
    import cloudpickle

    if shown is None:
        return None
    if "name" in shown:
        return user_ns.get(shown["name"])  # None (nothing shown) when the name could not be rebuilt
    if "pickled" in shown:
        try:
            return cloudpickle.loads(shown["pickled"])
        except Exception as err:  # noqa: BLE001 - a class the kernel cannot import, say
            print(
                f"the cell's value cannot be rebuilt in the notebook ({type(err).__name__}: {err})",
                file=sys.stderr,
            )
            return None
    print(
        f"the cell's value stayed in the worker ({shown.get('why')}): shown by its repr there",
        file=sys.stderr,
    )
    return WorkerRepr(str(shown.get("repr")))
