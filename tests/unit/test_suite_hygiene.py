"""The test suite's own rules, checked on its source with ``ast`` so they hold from now on.

1. No upper bound on a wall time. An assert that an elapsed time (a difference of two readings of
   ``time.monotonic()``, ``time.time()`` or ``time.perf_counter()``, or a recorded ``*elapsed*``,
   ``*duration*``, ``*wall*`` or ``took`` field) stays under a bound is a claim about speed: it fails
   on a loaded machine and proves nothing about behaviour. Speed is measured in ``bench/``; a test
   asserts what happened (it ended, it was killed, the row exists). A lower bound (it waited at least
   the time it had to) cannot fail on a slow machine and says what the code did, so it is allowed.
2. No assert that accepts several exit codes. A case gives one exit code; accepting ``(0, 1, 3)``
   hides the case changing under the test.
3. No bare sleep at the top of a test function: a test waits on the event it needs (a store row, a
   file, a line, a process state) with ``_waits.wait_for``. Sleeps inside a trial's workload (a
   module-level trial function, a child's source text) are not the test waiting, and are left alone.

An opt-out is a comment on the flagged line that says why: ``# timing-ok: <why>``,
``# exit-codes-ok: <why>`` or ``# sleep-ok: <why>``. Each one is a debt: keep them few.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

_CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns", "perf_counter_ns"}
_TIMED_WORDS = ("elapsed", "duration", "wall", "took")
_SETTINGS = ("timeout", "interval", "max_time", "budget", "limit", "grace", "every", "period")
_EXIT_WORDS = ("returncode", "exitcode", "exit_code", "exit_status", "rc", "code")
_UPPER = (ast.Lt, ast.LtE)
_LOWER = (ast.Gt, ast.GtE)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.text}"


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in _CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in _CLOCKS - {"time"}


class _Scope:
    """The names a function (or the module) binds to clock readings and to elapsed times."""

    def __init__(self, body: list[ast.stmt]) -> None:
        self.readings: set[str] = set()
        self.elapsed: set[str] = set()
        # two passes: an elapsed name may be computed from a reading bound further down a loop
        for _ in range(2):
            for node in _walk_scope(body):
                targets, value = _assignment(node)
                if value is None:
                    continue
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if self.is_elapsed(value):
                    self.elapsed.update(names)
                elif self._is_reading(value):
                    self.readings.update(names)

    def _is_reading(self, node: ast.AST) -> bool:
        return (
            _is_clock_call(node)
            or (isinstance(node, ast.Name) and node.id in self.readings)
            or (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Add)
                and (self._is_reading(node.left) or self._is_reading(node.right))
            )
        )

    def is_elapsed(self, node: ast.AST) -> bool:
        """``node`` is (or is computed from) a difference of clock readings, or an elapsed name."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in self.elapsed:
                return True
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub):
                if self._is_reading(sub.left) or self._is_reading(sub.right):
                    return True
        return False


def _assignment(node: ast.AST) -> tuple[list[ast.expr], ast.expr | None]:
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target], node.value
    if isinstance(node, ast.NamedExpr):
        return [node.target], node.value
    return [], None


def _walk_scope(body: list[ast.stmt]):
    """Every node of ``body``, not descending into nested functions or classes (their own scopes)."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    stack: list[ast.AST] = [n for n in reversed(body) if not isinstance(n, nested)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in reversed(list(ast.iter_child_nodes(node))) if not isinstance(c, nested))


def _leaf_name(node: ast.AST) -> str | None:
    """The last name of ``x``, ``a.b.x``, ``d["x"]`` or ``p.x()`` (a call's method name)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if isinstance(node, ast.Call):
        return _leaf_name(node.func)
    return None


def _is_timed_field(node: ast.AST) -> bool:
    """A recorded time: named for one (``elapsed_s``, ``duration_s``, ``wall``, ``took``), or any
    field in seconds (``heaps_cost_per_reading_s``: units are in the names here), less the settings
    (``timeout_s``, ``interval_s``, ``max_time_s``...) and the instants (``*_at``, ``t_s``)."""
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return False
    name = (_leaf_name(node) or "").lower()
    if name.endswith("_at") or name.startswith(_SETTINGS) or name == "t_s" or name.endswith("_t_s"):
        return False  # a setting, or an instant (``t_s``: seconds relative to an event), not a duration
    return name.endswith("_s") or any(
        word in name.split("_") or name.startswith(word) for word in _TIMED_WORDS
    )


def _is_constant_bound(node: ast.AST) -> bool:
    """A literal, a name, or arithmetic of them (``5``, ``timeout_s + 3``, ``CLI_BOUND_S``): a bound
    set by the test, not another recorded value (``r.finished_at - r.created_at``), which makes the
    comparison a consistency check."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            if not sub.attr.isupper():
                return False
        elif not isinstance(
            sub, (ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.expr_context)
        ):
            return False
    return True


def _has_margin(node: ast.AST) -> bool:
    """``node`` adds or takes a non-zero number of seconds (``total - 0.6``)."""
    return any(
        isinstance(sub, ast.BinOp)
        and isinstance(sub.op, (ast.Add, ast.Sub))
        and any(isinstance(side, ast.Constant) and side.value for side in (sub.left, sub.right))
        for sub in ast.walk(node)
    )


def _upper_bounds(compare: ast.Compare):
    """Each ``(time side, bound side)`` pair of ``compare`` in which the time side must stay below."""
    sides = [compare.left, *compare.comparators]
    for op, left, right in zip(compare.ops, sides[:-1], sides[1:], strict=True):
        if isinstance(op, _UPPER):
            yield left, right
        elif isinstance(op, _LOWER):
            yield right, left


def _timing_findings(tree: ast.Module, source: list[str], path: str) -> list[Finding]:
    found: list[Finding] = []
    scopes = [tree.body] + [
        n.body for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    for body in scopes:
        scope = _Scope(body)
        for node in _walk_scope(body):
            if not isinstance(node, ast.Assert):
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                for timed, bound in _upper_bounds(compare):
                    measured = scope.is_elapsed(timed) or _is_timed_field(timed)
                    if not measured:
                        continue
                    fixed_bound = _is_constant_bound(bound) and not scope.is_elapsed(bound)
                    # two measured times a fixed margin apart ("shown a second before it ended")
                    margin = scope.is_elapsed(bound) and _has_margin(bound)
                    if fixed_bound or margin:
                        found.append(_finding(node, source, path, "timing", "an upper bound on a wall time"))
                        break
                else:
                    continue
                break
    return found


def _is_exit_code(node: ast.AST) -> bool:
    name = _leaf_name(node)
    if name in ("wait", "poll") and isinstance(node, ast.Call):
        return True
    return name is not None and any(
        name == w or name.endswith("_" + w) or name == w + "s" for w in _EXIT_WORDS
    )


def _several_ints(node: ast.AST) -> bool:
    if not isinstance(node, (ast.Tuple, ast.Set, ast.List)) or len(node.elts) < 2:
        return False
    return all(
        isinstance(e, ast.Constant)
        and isinstance(e.value, int)
        and not isinstance(e.value, bool)
        or isinstance(e, ast.UnaryOp)
        and isinstance(e.operand, (ast.Constant, ast.Attribute))
        or isinstance(e, ast.Attribute)  # signal.SIGKILL, os.EX_OK ...
        for e in node.elts
    )


def _accepts_several_codes(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for op, left, right in zip(
                node.ops, [node.left, *node.comparators][:-1], node.comparators, strict=True
            ):
                if isinstance(op, ast.In) and _is_exit_code(left) and _several_ints(right):
                    return True
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            codes = [
                ast.dump(v.left)
                for v in node.values
                if isinstance(v, ast.Compare)
                and len(v.ops) == 1
                and isinstance(v.ops[0], ast.Eq)
                and _is_exit_code(v.left)
            ]
            if len(codes) != len(set(codes)):
                return True
    return False


def _exit_code_findings(tree: ast.Module, source: list[str], path: str) -> list[Finding]:
    return [
        _finding(node, source, path, "exit-codes", "an assert that accepts several exit codes")
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert) and _accepts_several_codes(node.test)
    ]


def _is_sleep_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "sleep"
        and isinstance(node.value.func.value, ast.Name)
        and node.value.func.value.id == "time"
    )


def _sleep_findings(tree: ast.Module, source: list[str], path: str) -> list[Finding]:
    """A ``time.sleep`` among a test function's own statements (not in a loop: a polling loop is
    reported by nothing here, but ``wait_for`` is the way to write one)."""
    found: list[Finding] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.name.startswith("test"):
            continue
        stack: list[ast.stmt] = list(fn.body)
        while stack:
            stmt = stack.pop()
            if _is_sleep_call(stmt):
                found.append(
                    _finding(stmt, source, path, "sleep", "a test that sleeps instead of waiting on an event")
                )
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # a helper defined in the test (a thread's body) is its own workload
            for field in ("body", "orelse", "finalbody", "handlers"):
                if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)) and field in ("body", "orelse"):
                    continue  # a loop's sleep paces the loop (a workload, a poll)
                stack.extend(getattr(stmt, field, []) or [])
    return found


_OPT_OUTS = {"timing": "# timing-ok:", "exit-codes": "# exit-codes-ok:", "sleep": "# sleep-ok:"}


def _finding(node: ast.stmt, source: list[str], path: str, rule: str, what: str) -> Finding:
    return Finding(path, node.lineno, rule, f"{what}: {source[node.lineno - 1].strip()}")


def _opted_out(f: Finding, node_lines: list[str]) -> bool:
    return any(_OPT_OUTS[f.rule] in line for line in node_lines)


def scan(path: Path) -> list[Finding]:
    text = path.read_text()
    source = text.splitlines()
    tree = ast.parse(text, filename=str(path))
    rel = str(path.relative_to(TESTS.parent)) if path.is_relative_to(TESTS.parent) else str(path)
    spans = {
        n.lineno: (n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, ast.stmt)
    }
    found = (
        _timing_findings(tree, source, rel)
        + _exit_code_findings(tree, source, rel)
        + _sleep_findings(tree, source, rel)
    )
    kept = []
    for f in found:
        first, last = spans.get(f.line, (f.line, f.line))
        if not _opted_out(f, source[first - 1 : last]):
            kept.append(f)
    return sorted(kept, key=lambda f: (f.path, f.line))


def _test_files() -> list[Path]:
    return sorted(
        p for p in TESTS.rglob("*.py") if p.name.startswith(("test_", "conftest")) or p.parent == TESTS
    )


#: Files with findings that are being reworked elsewhere, each with the findings it still has: an
#: entry goes when its file is fixed (the test below fails on an entry whose findings are gone, so
#: this list only shrinks). Nothing new may be added here: fix the test instead.
PENDING: dict[str, int] = {}


def test_the_suite_asserts_no_wall_time_bound_no_set_of_exit_codes_and_does_not_sleep_to_wait() -> None:
    findings = [f for path in _test_files() for f in scan(path)]
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.path] = counts.get(f.path, 0) + 1
    new = [f for f in findings if counts[f.path] > PENDING.get(f.path, 0)]
    assert not new, "\n" + "\n".join(map(str, new)) + "\n(see tests/unit/test_suite_hygiene.py's docstring)"
    fixed = {path: n for path, n in PENDING.items() if counts.get(path, 0) < n}
    assert not fixed, f"fewer findings than PENDING lists (lower or remove these entries): {fixed}"


# ---- the checker's own cases: it must catch each pattern, and let the allowed ones be -------------


def _scan_text(tmp_path: Path, code: str) -> list[str]:
    path = tmp_path / "test_sample.py"
    path.write_text(code)
    return [f.rule for f in scan(path)]


def test_an_elapsed_difference_under_a_bound_is_caught(tmp_path: Path) -> None:
    code = (
        "import time\n"
        "def test_x():\n"
        "    start = time.monotonic()\n"
        "    run()\n"
        "    elapsed = time.monotonic() - start\n"
        "    assert elapsed < 5\n"
        "    assert time.perf_counter() - start <= 0.5, 'fast'\n"
        "    assert 0.1 < round(elapsed, 2) < 3.0\n"
        "    took = time.time() - t0\n"
        "    assert took < timeout_s + 3\n"
        "    ended = time.monotonic()\n"
        "    assert first - start < (ended - start) - 1.0\n"
        "    assert first - start <= ended - start\n"
    )
    assert _scan_text(tmp_path, code) == ["timing"] * 5


def test_a_recorded_duration_under_a_bound_is_caught(tmp_path: Path) -> None:
    code = (
        "def test_x():\n"
        "    assert summary.duration_s < 0.5\n"
        "    assert report.elapsed_s < 3.5\n"
        "    assert data['elapsed_s'] < 125\n"
        "    assert 1.0 <= r.error['elapsed_s'] < 3.0\n"
        "    assert wall < 10, wall\n"
        "    assert alloc['heaps_cost_per_reading_s'] < 0.004\n"
        "    assert samples[0]['t_s'] < -2 and policy.interval_s <= 0.1\n"
    )
    assert _scan_text(tmp_path, code) == ["timing"] * 6


def test_lower_bounds_deadlines_and_timeouts_are_allowed(tmp_path: Path) -> None:
    code = (
        "import time\n"
        "def test_x():\n"
        "    start = time.monotonic()\n"
        "    deadline = time.monotonic() + 30\n"
        "    while time.monotonic() < deadline:\n"
        "        assert time.monotonic() < deadline, 'never started'\n"
        "    assert time.monotonic() - start >= held_s - 0.5\n"
        "    assert r.duration_s >= 0.6 and r.error['timeout_s'] == 1.5\n"
        "    assert r.worker_id in (0, 1)\n"
        "    assert a.status in ('ok', 'interrupted')\n"
        "    assert r.finished_at <= now\n"
        "    assert 0 <= s.duration_s <= s.finished_at - s.created_at - idle_s\n"
    )
    assert _scan_text(tmp_path, code) == []


def test_several_exit_codes_are_caught(tmp_path: Path) -> None:
    code = (
        "def test_x():\n"
        "    assert res.returncode in (0, 1, 3), res.stderr\n"
        "    assert rc in {0, 5}\n"
        "    assert proc.wait() in (-9, -15)\n"
        "    assert proc.returncode == 0 or proc.returncode == 1\n"
        "    assert proc.returncode == 3\n"
    )
    assert _scan_text(tmp_path, code) == ["exit-codes"] * 4


def test_a_test_that_sleeps_is_caught_and_a_workload_or_poll_is_not(tmp_path: Path) -> None:
    code = (
        "import time\n"
        "def trial(p):\n"
        "    time.sleep(0.5)\n"
        "def test_x():\n"
        "    proc = start()\n"
        "    time.sleep(2.0)\n"
        "    with open('f') as f:\n"
        "        time.sleep(1)\n"
        "    for _ in range(3):\n"
        "        time.sleep(0.1)\n"
        "    code = 'import time; time.sleep(30)'\n"
    )
    assert _scan_text(tmp_path, code) == ["sleep", "sleep"]


def test_a_commented_opt_out_silences_its_own_line_only(tmp_path: Path) -> None:
    code = (
        "import time\n"
        "def test_x():\n"
        "    time.sleep(12)  # sleep-ok: the run must sit idle longer than the axis's gap\n"
        "    assert summary.duration_s < 0.5  # timing-ok: the measured thing is a recorded field\n"
        "    assert rc in (0, 5)  # exit-codes-ok: \n"
        "    assert report.elapsed_s < 3.5\n"
    )
    assert _scan_text(tmp_path, code) == ["timing"]


def test_no_two_test_modules_share_a_name() -> None:
    # the suite imports test modules by their base name (rootdir import mode): a second module of
    # the same name stops the whole run at collection
    seen: dict[str, Path] = {}
    clashes = []
    for path in TESTS.rglob("test_*.py"):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(TESTS)} and {path.relative_to(TESTS)}")
        seen.setdefault(path.name, path)
    assert not clashes, "rename one of each pair: " + "; ".join(clashes)
