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
