"""Package boundaries: across packages, code uses only each package's public face.

A subpackage of ``trainguard`` (``runner``, ``store``, ``leaks``, ...) keeps its implementation in
underscore modules and exposes what others may use in its ``__init__`` (or a public module such as
``runner.policy``). Another package importing ``trainguard.store._store`` or a ``_name`` from
``trainguard.frameworks`` ties itself to internals the owner must be free to change. The root's
own modules (``trainguard._nesting``, ``trainguard._version``, ...) are shared by every package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trainguard

SRC = Path(trainguard.__file__).parent


def _reaches(module: str, names: list[str], subpackages: set[str]) -> list[str]:
    """The private parts of other packages that ``from module import names`` (or ``import module``)
    reaches: an underscore module under a subpackage, or an underscore name from one."""
    parts = module.split(".")
    if parts[0] != "trainguard" or len(parts) < 2 or parts[1] not in subpackages:
        return []
    if any(p.startswith("_") for p in parts[2:]):
        return [module]
    return [f"{module}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]


def _violations(src: Path = SRC) -> list[str]:
    subpackages = {p.name for p in src.iterdir() if (p / "__init__.py").is_file()}
    found = []
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).parts
        owner = parts[0] if len(parts) > 1 else None  # None: one of the root's own modules
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = _reaches(node.module, [a.name for a in node.names], subpackages)
            elif isinstance(node, ast.ImportFrom) and node.level:
                # a relative import that climbs out of its package
                targets = [f"{'.' * node.level}{node.module or ''}"] if node.level > 1 else []
            elif isinstance(node, ast.Import):
                targets = [t for a in node.names for t in _reaches(a.name, [], subpackages)]
            else:
                continue
            for target in targets:
                if target.startswith(".") or target.split(".")[1] != owner:
                    found.append(f"{path.relative_to(src)}:{node.lineno} imports {target}")
    return found


def test_no_package_reaches_into_another_packages_private_modules():
    assert _violations() == []


def test_the_check_sees_each_kind_of_reach(tmp_path):
    # the walker itself, on a small tree: each reach into another package is found, a package's
    # imports of its own private modules and of others' public faces are not
    for package in ("cli", "store", "frameworks"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "cli" / "bad.py").write_text(
        "from trainguard.store._store import _dumps\n"
        "from trainguard.frameworks import _quiet\n"
        "import trainguard.store._schema\n"
        "from ..store import Store\n"
        "from trainguard.store import Store\n"
        "from trainguard.cli._display import console\n"
        "from trainguard._nesting import refuse_nested\n"
    )
    found = _violations(tmp_path)
    assert found == [
        "cli/bad.py:1 imports trainguard.store._store",
        "cli/bad.py:2 imports trainguard.frameworks._quiet",
        "cli/bad.py:3 imports trainguard.store._schema",
        "cli/bad.py:4 imports ..store",
    ]


def test_the_pure_policy_and_the_store_stay_low():
    # runner/policy/ is pure decisions over series: no store, no processes; the store does not
    # import the package root (which would make it depend on everything the root re-exports)
    for path in (SRC / "runner" / "policy").glob("*.py"):
        policy = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(policy) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.startswith("trainguard.store") for m in imported), (path.name, imported)
    for path in (SRC / "store").glob("*.py"):
        tree = ast.parse(path.read_text())
        roots = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "trainguard"]
        assert roots == [], f"{path.name} imports the package root"


def test_policy_and_store_agree_on_attempt_statuses():
    from trainguard import store
    from trainguard.runner import policy

    assert set(policy.ATTEMPT_STATUSES) == set(store.ATTEMPT_STATUSES)


def test_the_reports_policy_defaults_are_the_policys():
    # the report marks changed policy values against trainguard/_policy_defaults.py, kept apart
    # from runner.policy so that the report never imports the runner
    from trainguard._policy_defaults import POLICY_DEFAULTS
    from trainguard.runner.policy import Policy

    assert dict(POLICY_DEFAULTS) == Policy().to_dict(), "update trainguard/_policy_defaults.py"


def test_host_memory_is_a_deprecated_name_of_tree_memory():
    import warnings

    assert "host_memory" not in trainguard.__all__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alias = trainguard.host_memory
    assert alias is trainguard.tree_memory
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "use that" in str(caught[0].message)


#: Functions allowed past 80 lines of code (docstrings not counted): none. The check covers every
#: package and root module of src/trainguard; a function that grows past it is split, not listed.
LONG_FUNCTIONS: set[str] = set()
#: Classes allowed past 400 lines. The store is split by table into mixins (its file checks in
#: store/_file.py), the Runner's store side is runner/_runner_store.py, the Slurm backend's door
#: for pilots runner/backends/slurm_listen.py; the session by the state its parts own
#: (runner/session/). None is listed.
LONG_CLASSES: set[str] = set()


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring does not count
    return (node.end_lineno or node.lineno) - body[0].lineno + 1


def _long_definitions(
    src: Path = SRC, limit: int = 80, class_limit: int = 400
) -> tuple[list[str], list[str]]:
    functions, classes = [], []
    for path in sorted(src.rglob("*.py")):
        where = path.relative_to(src).as_posix()
        tree = ast.parse(path.read_text())
        for parent in ast.walk(tree):
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, ast.ClassDef):
                    if (node.end_lineno or node.lineno) - node.lineno + 1 > class_limit:
                        classes.append(f"{where}:{node.name}")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > limit:
                    owner = f"{parent.name}." if isinstance(parent, ast.ClassDef) else ""
                    functions.append(f"{where}:{owner}{node.name}")
    return functions, classes


def test_no_long_functions_or_classes_but_the_listed_ones():
    functions, classes = _long_definitions()
    assert set(functions) <= LONG_FUNCTIONS, "split these (no function over 80 lines of code)"
    assert set(classes) <= LONG_CLASSES, "split these (no class over 400 lines)"
    # a listed one that was split comes off the list
    assert LONG_FUNCTIONS <= set(functions), LONG_FUNCTIONS - set(functions)
    assert LONG_CLASSES <= set(classes), LONG_CLASSES - set(classes)


def test_the_length_check_sees_nested_packages(tmp_path):
    (tmp_path / "pkg" / "inner").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    (tmp_path / "pkg" / "inner" / "mod.py").write_text(f'def long():\n    """Doc."""\n{body}\n')
    (tmp_path / "pkg" / "inner" / "short.py").write_text(f'def fine():\n    """Doc."""\n{body[:-13]}\n')
    assert _long_definitions(tmp_path) == (["pkg/inner/mod.py:long"], [])


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import a module can make at run time, inside functions too; those under
    ``if TYPE_CHECKING:`` are for the type checker only and are left out."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _unit(path: Path, src: Path) -> str:
    """The package a module belongs to (a root module is a unit of its own)."""
    return path.relative_to(src).with_suffix("").parts[0]


def _package_edges(src: Path = SRC) -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        me = _unit(path, src)
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level or not node.module:
                    continue
                parts = node.module.split(".")
                targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
                if parts[0] != "trainguard":
                    continue
            else:
                targets = [a.name.split(".")[1] for a in node.names if a.name.startswith("trainguard.")]
            for other in targets:
                known = (src / other).is_dir() or (src / f"{other}.py").is_file()
                if other != me and known:
                    edges.setdefault((me, other), []).append(f"{path.relative_to(src)}:{node.lineno}")
    return edges


def _cycle_edges(edges: dict[tuple[str, str], list[str]]) -> set[tuple[str, str]]:
    """The edges that lie on a cycle: ``a -> b`` where ``b`` reaches ``a`` again."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return False

    return {(a, b) for a, b in edges if reaches(b, a)}


#: Edges still on a cycle, to be removed: none. The last four (the report reading the policy's
#: defaults and the leak statistics' slope from the runner and the leak check, which hand themselves
#: to the report) went with report/_data.py: the slope and the defaults now sit below both.
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()


def test_the_report_imports_neither_the_runner_nor_the_leak_check():
    # the runner (Runner.report) and the leak check (LeakReport.to_html) hand themselves to the
    # report package; the report never reaches back, not even inside a function
    edges = _package_edges()
    assert {e: edges[e] for e in (("report", "runner"), ("report", "leaks")) if e in edges} == {}


def test_no_import_cycle_between_packages_counting_imports_inside_functions():
    edges = _package_edges()
    on_cycles = _cycle_edges(edges)
    new = {e: edges[e] for e in on_cycles - KNOWN_CYCLE_EDGES}
    assert new == {}, "these imports close a cycle between packages"
    assert KNOWN_CYCLE_EDGES <= on_cycles, (
        f"no longer on a cycle, take off the list: {KNOWN_CYCLE_EDGES - on_cycles}"
    )


def test_the_cycle_check_counts_imports_inside_functions_and_not_type_checking_ones(tmp_path):
    for package in ("alpha", "beta"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "alpha" / "a.py").write_text("from trainguard.beta import thing\n")
    (tmp_path / "beta" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainguard.alpha import a\n"
    )
    assert _cycle_edges(_package_edges(tmp_path)) == set()
    (tmp_path / "beta" / "c.py").write_text("def late():\n    from trainguard.alpha import a\n")
    assert _cycle_edges(_package_edges(tmp_path)) == {("alpha", "beta"), ("beta", "alpha")}


def test_the_backend_contract_is_public_and_its_docstring_is_the_contract():
    from trainguard.runner import BaseBackend, BaseWorker
    from trainguard.runner.backends.local import LocalBackend

    assert issubclass(LocalBackend, BaseBackend)
    doc = BaseBackend.__doc__ or ""
    assert "The contract, for implementers" in doc
    for name in ("start", "inbox", "send", "read", "kill", "wait", "end", "enforces_limits", "classify"):
        assert name in doc, name
        assert hasattr(BaseBackend, name) or hasattr(BaseWorker, name), name


#: The most pairs of places `duplicates` may list over src/ (it was 86, then 62 before the folds).
#: Most of what is left is shape alone: keyword arguments handed on, fields assigned in an ``__init__``.
MOST_DUPLICATE_PAIRS = 30


def _duplicate_pairs(tree: Path) -> tuple[int, str]:
    """How many pairs of places ``duplicates`` lists over ``tree``, and its whole answer."""
    import re
    import shutil
    import subprocess

    exe = shutil.which("duplicates")
    if exe is None:
        pytest.skip("the `duplicates` command is not on PATH (it comes with the project's dev machines)")
    answer = subprocess.run(
        [exe, "--most", "200", "--seconds", "120"], cwd=tree, capture_output=True, text=True, timeout=300
    ).stdout
    assert "incomplete:" not in answer, answer
    first = answer.splitlines()[0] if answer else ""
    if first.startswith("no duplicates"):
        return 0, answer
    found = re.match(r"(\d+) pairs? of places", first)
    assert found, answer
    return int(found.group(1)), answer


def test_the_source_repeats_itself_in_at_most_30_pairs_of_places():
    pairs, answer = _duplicate_pairs(SRC.parent)
    assert pairs <= MOST_DUPLICATE_PAIRS, f"fold what these rows repeat:\n{answer}"
