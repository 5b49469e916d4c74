"""The README's notebook snippets, run as written in a real Jupyter kernel (Keras on TensorFlow).

The README's own ``%%trainguard`` cell used to bring ``model`` back by value and TensorFlow with
it (kernel RSS 67 -> 678 MiB after one cell). Here the kernel ends with no framework loaded.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from _needs import needs

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
needs("keras")
needs("tensorflow")

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _notebook_snippets() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## In a notebook") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    wanted = [
        b for b in blocks if b.startswith(("%load_ext trainguard", "%%trainguard", "import trainguard"))
    ]
    assert len(wanted) == 3, blocks
    return wanted


def test_the_readme_notebook_cells_leave_the_kernel_free_of_tensorflow():
    setup, cell, isolated = _notebook_snippets()
    nb = nbformat.v4.new_notebook()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True)
    with client.setup_kernel(env=env):

        def run(source: str) -> list[dict]:
            nb.cells.append(nbformat.v4.new_code_cell(source))
            client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
            outputs = nb.cells[-1].outputs
            assert not [o for o in outputs if o["output_type"] == "error"], outputs
            return outputs

        def stream(outputs: list[dict], name: str) -> str:
            return "".join(
                o.get("text", "") for o in outputs if o["output_type"] == "stream" and o["name"] == name
            )

        run(setup)
        outputs = run(cell)
        assert stream(outputs, "stdout").startswith("loss "), outputs
        note = stream(outputs, "stderr")
        assert "kept in the worker" in note and "model (a keras Sequential" in note, note
        assert "%%trainguard --out model" in note, note
        run(isolated)
        checked = stream(
            run(
                "import json, sys\nprint(json.dumps([type(loss).__name__, len(losses), "
                "sorted(m for m in ('tensorflow', 'keras', 'torch', 'jax') if m in sys.modules)]))"
            ),
            "stdout",
        )
        assert json.loads(checked) == ["float", 8, []]
