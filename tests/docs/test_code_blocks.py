"""Every Python block of the documentation site runs, so no snippet rots.

Each ```` ```python ```` block of ``docs/`` is run as a script in a folder of its page's own (a page's
blocks in order, so a later block reads the store an earlier one wrote), and must exit 0. A page
whose blocks are notebook cells (a line that starts with ``%``) runs as one notebook in a real
Jupyter kernel instead. A block that is not meant to run says why in a ``<!-- not run: ... -->``
comment before it (tests/docs/blocks.py); a test checks that every such reason is given, and none
is left for a block that is complete.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from blocks import ROOT, Block, blocks, pages, python_blocks  # tests/docs is on sys.path (conftest)

SRC = str(ROOT / "src")
# a block that starts a framework, a worker or a study takes seconds to minutes on 2 cores
_HEAVY = re.compile(
    r"keras|tensorflow|torch|optuna|ray|sklearn|mlflow|Runner|leakcheck|compare|find_batch_size|isolated"
)


def _is_notebook(page_blocks: list[Block]) -> bool:
    return any(line.startswith("%") for b in page_blocks for line in b.code.splitlines())


def _script_blocks() -> list[Block]:
    out = []
    for page in pages():
        page_blocks = [b for b in blocks(page) if b.language in ("python", "py")]
        if not _is_notebook(page_blocks):
            out += [b for b in page_blocks if b.not_run is None]
    return out


def _notebook_pages() -> list[str]:
    out = []
    for page in pages():
        page_blocks = [b for b in blocks(page) if b.language in ("python", "py")]
        if _is_notebook(page_blocks):
            out.append(str(page.relative_to(ROOT / "docs")))
    return out


def _params(items, heavy):
    return [
        pytest.param(i, id=getattr(i, "id", i), marks=[pytest.mark.slow] if heavy(i) else []) for i in items
    ]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "MPLBACKEND": "Agg",
    }


@pytest.fixture(scope="module")
def page_folders(tmp_path_factory):
    folders: dict[str, Path] = {}

    def folder(page: str) -> Path:
        if page not in folders:
            folders[page] = tmp_path_factory.mktemp(page.replace("/", "-").removesuffix(".md"))
        return folders[page]

    return folder


@pytest.mark.parametrize("block", _params(_script_blocks(), lambda b: bool(_HEAVY.search(b.code))))
def test_block_runs(block: Block, page_folders) -> None:
    folder = page_folders(block.page)
    script = folder / f"block_{block.line}.py"
    script.write_text(block.code)
    proc = subprocess.run(
        [sys.executable, script.name], cwd=folder, env=_env(), capture_output=True, text=True, timeout=580
    )
    assert proc.returncode == 0, (
        f"docs/{block.id} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", _notebook_pages())
def test_notebook_page_runs(page: str, tmp_path: Path) -> None:
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    cells = [b for b in blocks(ROOT / "docs" / page) if b.language in ("python", "py") and b.not_run is None]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(b.code.rstrip("\n")) for b in cells]
    client = nbclient.NotebookClient(
        nb, timeout=560, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    old = dict(os.environ)
    os.environ.update(_env())  # the kernel inherits it
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"docs/{page}: a cell failed:\n{str(e)[-3000:]}")
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_every_block_not_run_says_why() -> None:
    assert python_blocks(), "no Python block found under docs/"
    for block in python_blocks():
        if block.not_run is not None:
            assert len(block.not_run) > 15, f"docs/{block.id}: say why the block is not run"
