"""Which names a notebook cell reads and assigns, and %%trainguard's options (pure)."""

from __future__ import annotations

import ast

import pytest

from trainguard.exceptions import ConfigError
from trainguard.notebook import parse_options
from trainguard.notebook._names import cell_names


def names(source: str):
    return cell_names(ast.parse(source))


def test_reads_and_assignments_at_the_cells_top_level():
    read, assigned = names(
        "import numpy as np\n"
        "x = np.ones(n) * scale\n"
        "total += x.sum()\n"
        "def f(a):\n    b = a + offset\n    return b\n"
        "class Model:\n    size = width\n"
        "ys = [v * k for v in xs]\n"
        "for i, row in enumerate(rows):\n    pass\n"
        "with open(path) as fh:\n    text = fh.read()\n"
        "try:\n    pass\nexcept ValueError as err:\n    pass\n"
    )
    assert {"n", "scale", "total", "offset", "width", "k", "xs", "rows", "path"} <= read
    assert "a" not in assigned and "b" not in assigned and "v" not in assigned
    assert assigned == ["np", "x", "total", "f", "Model", "ys", "i", "row", "fh", "text", "err"]


def test_a_global_statement_in_a_cell_function_assigns_the_name():
    _, assigned = names("def bump():\n    global count\n    count = 1\nbump()")
    assert assigned == ["bump", "count"]


def test_options_parse_and_unknown_ones_name_the_valid_ones():
    assert parse_options("--memory-limit 4GB --timeout=30m --keras-backend torch --threads 2 --fresh") == {
        "memory_limit": "4GB",
        "timeout": "30m",
        "keras_backend": "torch",
        "threads": 2,
        "fresh": True,
    }
    with pytest.raises(
        ConfigError,
        match=r"no option '--memory' : the options are|no option '--memory': the options are --memory-limit",
    ):
        parse_options("--memory 4GB")
    with pytest.raises(ConfigError, match="--timeout needs a value, such as --timeout 30m"):
        parse_options("--timeout")


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("x = 1\nx + 1", True),
        ("x + 1  # a comment\n\n", True),
        ("x + 1;", False),
        ("x + 1;  # hidden, as IPython hides it\n", False),
        ("x = 1", False),
        ("for i in range(2):\n    i", False),
        ("print('a;')", True),
        ("", False),
    ],
)
def test_the_cells_value_is_shown_as_ipython_shows_it(source, shown):
    from trainguard.notebook._names import shows_last_value

    assert shows_last_value(source, ast.parse(source)) is shown


def _run(source: str, inputs: dict, show_value: bool = True):
    import cloudpickle

    from trainguard.notebook._cell import run_cell

    _, assigned = names(source)
    values, not_returned, shown, _ = run_cell(
        source, "<cell>", cloudpickle.dumps(inputs), assigned, show_value
    )
    return values, not_returned, shown


def test_the_last_expression_comes_back_by_value_by_name_or_as_its_repr():
    import cloudpickle

    from trainguard.notebook._run import WorkerRepr, cell_value

    values, _, shown = _run("y = x * 2\n[y, y + 1]", {"x": 5})
    assert cloudpickle.loads(shown["pickled"]) == [10, 11] and "y" in values
    values, _, shown = _run("z = {'a': x}\nz", {"x": 5})
    assert shown == {"name": "z"}  # sent once, as the name that comes back
    ns = {"z": cloudpickle.loads(values["z"])}
    assert cell_value(ns, shown) is ns["z"]
    _, not_returned, shown = _run("import threading\nthreading.Lock()", {})
    assert "lock" in shown["repr"] and "lock" in shown["why"] and not not_returned
    value = cell_value({}, shown)
    assert isinstance(value, WorkerRepr) and repr(value) == shown["repr"]
    # None shows nothing, nor a cell the kernel did not ask about, and statements before it ran
    assert _run("x = 1\nNone", {})[2] is None
    values, _, shown = _run("w = 3\nw + 1", {}, show_value=False)
    assert shown is None and cloudpickle.loads(values["w"]) == 3
