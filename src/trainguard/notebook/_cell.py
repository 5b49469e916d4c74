"""Runs one notebook cell inside a guarded worker (worker side; imports nothing heavy).

The cell's source runs in a fresh namespace holding the names it reads, as the notebook had them
(unpickled by value); afterwards each name it assigned (or rebound) is pickled alone, so that one
that cannot come back (a live model holding a device, an open file) is named and the rest still
come back. The value returned is ``(values: name -> pickled bytes, not_returned: name -> reason)``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_cell"]


def run_cell(
    source: str, filename: str, inputs_pickled: bytes, assigned: list[str]
) -> tuple[dict[str, bytes], dict[str, str]]:
    import linecache

    import cloudpickle

    from trainguard.guarded import describe

    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    inputs: dict[str, Any] = cloudpickle.loads(inputs_pickled)
    namespace.update(inputs)
    # tracebacks show the cell's lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sent = {name: id(value) for name, value in inputs.items()}
    code = compile(source, filename, "exec")
    exec(code, namespace)  # noqa: S102 - the user's own cell, in the user's own worker
    candidates = [n for n in assigned if n in namespace]
    candidates += [
        n
        for n, v in namespace.items()
        if not n.startswith("__") and n not in candidates and (n not in sent or sent[n] != id(v))
    ]
    values: dict[str, bytes] = {}
    not_returned: dict[str, str] = {}
    for name in candidates:
        value = namespace[name]
        try:
            values[name] = cloudpickle.dumps(value)
        except Exception as err:  # noqa: BLE001 - pickling anything can raise anything
            hint = (
                "save it to a file"
                if "model" in type(value).__name__.lower()
                else "save what you need from it"
            )
            not_returned[name] = f"{describe(value)}; {hint} ({type(err).__name__}: {str(err)[:120]})"
    return values, not_returned
