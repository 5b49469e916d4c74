"""The code blocks of the documentation pages, as the tests see them.

A ```` ```python ```` block is run by ``tests/docs/test_code_blocks.py`` unless the line before it is
an HTML comment ``<!-- not run: REASON -->`` (a fragment that names your own ``build_model()``, a
notebook cell, a cluster the tests cannot reach), which says why. Blocks of one page run one after
the other in one folder, each as its own script, so a page's later block may read what an earlier
one wrote (a store, a file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.+?)\s*-->$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to docs/
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    not_run: str | None  # the reason it is not run, or None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            language = stripped[3:].strip().split(" ")[0]
            start = i
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                line = lines[i]
                body.append(line[len(indent) :] if line.startswith(indent) else line)
                i += 1
            previous = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            match = _NOT_RUN.match(previous)
            out.append(
                Block(
                    page=str(page.relative_to(DOCS)),
                    line=start + 1,
                    language=language,
                    code="\n".join(body) + "\n",
                    not_run=match.group("reason") if match else None,
                )
            )
        i += 1
    return out


def pages() -> list[Path]:
    """The site's pages (a file whose name starts with ``_`` is not one)."""
    return sorted(p for p in DOCS.rglob("*.md") if not p.name.startswith("_"))


def python_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.language in ("python", "py")]
