"""Which names a cell reads from the notebook and which it assigns (pure, over the cell's AST)."""

from __future__ import annotations

import ast
import builtins

__all__ = ["cell_names"]

#: names of IPython's own that a cell may read but that are never sent
_IPYTHON = frozenset({"In", "Out", "get_ipython", "exit", "quit", "_ih", "_oh", "_dh", "_", "__", "___"})


class _Names(ast.NodeVisitor):
    def __init__(self) -> None:
        self.read: set[str] = set()
        self.assigned: list[str] = []
        self._depth = 0  # inside a function, class or lambda body: what it binds stays local

    def _bind(self, name: str) -> None:
        if self._depth == 0 and name not in self.assigned:
            self.assigned.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load | ast.Del):
            self.read.add(node.id)
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.read.add(node.target.id)
        self.generic_visit(node)

    def _scope(self, node: ast.AST, name: str | None) -> None:
        if name is not None:
            self._bind(name)
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        self._scope(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        self._scope(node, node.name)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._scope(node, None)

    def visit_ListComp(self, node: ast.AST) -> None:
        self._scope(node, None)

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._bind(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self.read.add(name)
            if name not in self.assigned:
                self.assigned.append(name)  # a function of the cell assigns it as a global


def cell_names(tree: ast.AST) -> tuple[set[str], list[str]]:
    """``(names read, names assigned at the cell's top level, in order)``; builtins and IPython's
    own names are left out of the names read."""
    visitor = _Names()
    visitor.visit(tree)
    read = {n for n in visitor.read if n not in _IPYTHON and not n.startswith("__")}
    return read, visitor.assigned


def is_builtin(name: str) -> bool:
    return hasattr(builtins, name)


def shows_last_value(source: str, tree: ast.Module) -> bool:
    """Whether IPython would show the cell's value (``Out[n]``): its last statement is an
    expression and the cell does not end with ``;`` (IPython's own test: the last token)."""
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return False
    return not ends_with_semicolon(source)


def ends_with_semicolon(source: str) -> bool:
    """Whether the last token of ``source`` (comments and line ends aside) is ``;``."""
    import io
    import tokenize

    skipped = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.DEDENT)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    for token in reversed(tokens):
        if token.type in skipped:
            continue
        return token.type == tokenize.OP and token.string == ";"
    return False
