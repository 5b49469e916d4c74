"""``%%trainguard`` keeps deep-learning frameworks out of the kernel (a real Jupyter kernel).

A Keras 3 model or a torch module pickles, so bringing it back by value would import its
framework into the kernel (TensorFlow: +600 MiB after one cell), the growth the magic exists to
keep out. Here the kernel never imports one: what a cell makes with a framework stays in the
worker unless named with ``--out``, and numbers and numpy arrays come back.
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
needs("torch")

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")
FRAMEWORKS = ("tensorflow", "keras", "torch", "jax")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run():
    nb = nbformat.v4.new_notebook()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True)
    with client.setup_kernel(env=env):

        def execute(source: str) -> list[dict]:
            nb.cells.append(nbformat.v4.new_code_cell(source))
            index = len(nb.cells) - 1
            client.execute_cell(nb.cells[index], index)
            return nb.cells[index].outputs

        # every test of the module needs the magic and these names, whichever test process runs it
        _no_error(execute("%load_ext trainguard\nimport gc, sys, psutil, numpy as np"))
        yield execute


def _text(outputs: list[dict], name: str) -> str:
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream" and o["name"] == name)


def _no_error(outputs: list[dict]) -> None:
    assert not [o for o in outputs if o["output_type"] == "error"], outputs


def _value(run, expr: str):
    return json.loads(_text(run(f"import json\nprint(json.dumps({expr}))"), "stdout"))


def _loaded(run) -> list[str]:
    return _value(run, f"sorted(m for m in {FRAMEWORKS!r} if m in sys.modules)")


TORCH_CELL = """%%trainguard
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(100, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.Adam(model.parameters())
xt, yt = torch.from_numpy(x), torch.from_numpy(y)
for _ in range(20):
    opt.zero_grad(); loss_t = torch.nn.functional.mse_loss(model(xt), yt); loss_t.backward(); opt.step()
loss = float(loss_t.detach())
pred = model(xt).detach().numpy()
"""


def test_a_torch_cell_leaves_the_kernel_free_of_torch_and_flat(run):
    _no_error(
        run(
            "x = np.random.rand(2000, 100).astype('float32')\ny = np.random.rand(2000, 1).astype('float32')\n"
            "rss = [psutil.Process().memory_info().rss]"
        )
    )
    for _ in range(4):
        outputs = run(TORCH_CELL)
        _no_error(outputs)
        note = _text(outputs, "stderr")
        # one line: what stayed, and how to ask for it
        assert note.count("\n") == 1 and "kept in the worker" in note, outputs
        assert re.search(r"model \(a torch Sequential, torch\)", note) and "--out " in note, note
        assert "--out model,opt,xt,yt,loss_t\n" in note, note  # not `torch`, not `pred`
        run("gc.collect(); rss.append(psutil.Process().memory_info().rss)")
    assert _loaded(run) == []
    assert _value(run, "[type(loss).__name__, type(pred).__module__, pred.shape]") == [
        "float",
        "numpy",
        [2000, 1],
    ]
    assert _value(run, "'model' in globals() or 'loss_t' in globals()") is False
    growth_mib = _value(run, "(rss[-1] - rss[0]) / 2**20")
    assert growth_mib < 60, growth_mib
    # the cell's value: a framework object is shown by its repr, not brought back
    outputs = run("%%trainguard\nimport torch\ntorch.zeros(2)")
    assert "stayed in the worker" in _text(outputs, "stderr") and "tensor([0., 0.])" in str(outputs)
    assert _loaded(run) == []


def test_a_framework_exception_fails_the_cell_without_loading_the_framework(run):
    outputs = run(
        "%%trainguard\nimport torch\nraise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')"
    )
    [error] = [o for o in outputs if o["output_type"] == "error"]
    # the nearest built-in type (torch's is a RuntimeError), its message naming torch's own
    assert error["ename"] == "RuntimeError", error
    assert error["evalue"].startswith("torch.OutOfMemoryError: CUDA out of memory"), error
    assert _loaded(run) == []


def test_out_brings_a_framework_object_back(run):
    outputs = run(
        "%%trainguard --out model\nimport torch\nmodel = torch.nn.Linear(3, 1)\nw = model.weight.shape[1]"
    )
    _no_error(outputs)
    assert "kept in the worker" not in _text(outputs, "stderr"), outputs
    assert _value(run, "[type(model).__module__, w, 'torch' in sys.modules]") == [
        "torch.nn.modules.linear",
        3,
        True,
    ]


def test_out_names_must_be_variable_names(run):
    outputs = run("%%trainguard --out 'model weights'\nz = 1")
    text = _text(outputs, "stderr")
    assert text.startswith("UsageError: ") and "--out model" in text and text.count("\n") == 1, outputs
