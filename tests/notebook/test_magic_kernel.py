"""``%%trainguard`` in a real Jupyter kernel (ipykernel, driven by nbclient), cell by cell.

One kernel for the module: each test runs its cells in it, so the kernel's state carries over as
in a notebook, and every test reads the outputs the notebook would show.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = pytest.mark.slow


class _Watched(nbclient.NotebookClient):
    """Calls ``on_output(text)`` as each output message reaches the client, while its cell runs."""

    def output(self, outs, msg, display_id, cell_index):  # noqa: ANN001 - nbclient's signature
        self.on_output(msg["content"].get("text", ""))
        return super().output(outs, msg, display_id, cell_index)


@pytest.fixture(scope="module")
def kernel():
    nb = nbformat.v4.new_notebook()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    client = _Watched(nb, timeout=180, kernel_name="python3", allow_errors=True)
    client.on_output = lambda text: None
    with client.setup_kernel(env=env):

        def run(source: str) -> list[dict]:
            nb.cells.append(nbformat.v4.new_code_cell(source))
            index = len(nb.cells) - 1
            client.execute_cell(nb.cells[index], index)
            return nb.cells[index].outputs

        run("%load_ext trainguard\nimport json, os, psutil\nx = 5\nKERNEL_PID = os.getpid()")
        yield run, client


def _text(outputs: list[dict], name: str | None = None) -> str:
    return "".join(
        o.get("text", "")
        for o in outputs
        if o["output_type"] == "stream" and (name is None or o["name"] == name)
    )


def _error(outputs: list[dict]) -> dict:
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert len(errors) == 1, outputs
    return errors[0]


def _usage_error(outputs: list[dict]) -> str:
    """IPython shows a UsageError as one line on stderr: ``UsageError: ...``."""
    text = _text(outputs, "stderr")
    assert text.startswith("UsageError: ") and text.count("\n") == 1, outputs
    return text[len("UsageError: ") :].strip()


def _value(run, expr: str):
    return json.loads(_text(run(f"print(json.dumps({expr}))"), "stdout"))


def test_a_cell_that_keeps_25mb_a_run_leaves_the_kernel_flat(kernel):
    run, _ = kernel
    run(
        "k = 0\nkernel_rss = []\nimport gc; gc.collect()\nkernel_rss.append(psutil.Process().memory_info().rss)"
    )
    cell = (
        "%%trainguard\n"
        "import sys\n"
        "sys.modules.setdefault('held_by_the_worker', []).append(b'\\x01' * (25 * 2**20))  # 25 MB more a run\n"
        "k = k + 1\n"
        "worker = os.getpid()\n"
    )
    seen = []
    for _ in range(8):
        outputs = run(cell)
        assert not [o for o in outputs if o["output_type"] == "error"], outputs
        seen.append(_value(run, "[k, worker]"))
        run("kernel_rss.append(psutil.Process().memory_info().rss)")
    run("gc.collect(); kernel_rss.append(psutil.Process().memory_info().rss)")
    growth = _value(run, "kernel_rss[-1] - kernel_rss[0]")
    assert [k for k, _ in seen] == list(range(1, 9))  # each run's assigned value came back
    assert all(pid != os.getpid() for _, pid in seen)
    assert growth < 40 * 2**20, growth / 2**20
    # the same cell in the kernel keeps its 25 MB there (what the guard spares the kernel)
    run(
        "r0 = psutil.Process().memory_info().rss\n"
        + cell.split("\n", 1)[1]
        + "r1 = psutil.Process().memory_info().rss"
    )
    assert _value(run, "r1 - r0") > 20 * 2**20


def test_errors_are_errors_of_the_cell_and_the_kernel_is_unchanged(kernel):
    run, _ = kernel
    err = _error(run("%%trainguard\nx = 6\nd = {}\nd['nope']"))
    assert err["ename"] == "KeyError" and "nope" in err["evalue"]
    err = _error(run("%%trainguard --memory-limit 300MB\nx = 7\nbig = b'\\x01' * (700 * 2**20)\n"))
    assert err["ename"] == "MemoryLimitError" and "memory_limit" in err["evalue"], err
    err = _error(run("%%trainguard\nx = 8\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)"))
    assert err["ename"] == "WorkerCrashedError" and "SIGKILL" in err["evalue"], err
    # nothing a failed cell assigned reached the notebook, and the next cell runs
    assert _value(run, "[x, 'big' in globals()]") == [5, False]
    run("%%trainguard\nafter = x + 1")
    assert _value(run, "after") == 6


def test_output_streams_into_the_cell_while_it_runs(kernel, tmp_path):
    # the cell waits for a file the client writes only once it has seen the cell's first line: a
    # cell whose output reached the notebook only at its end would wait in vain and say so
    run, client = kernel
    seen = tmp_path / "first-seen"
    client.on_output = lambda text: seen.touch() if "first" in text else None
    try:
        outputs = run(
            "%%trainguard\nimport os, time\nprint('first', flush=True)\n"
            "deadline = time.monotonic() + 60\n"
            f"while not os.path.exists({str(seen)!r}) and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
            f"print('second' if os.path.exists({str(seen)!r}) else 'first line not shown while the cell ran')"
        )
    finally:
        client.on_output = lambda text: None
    assert _text(outputs, "stdout") == "first\nsecond\n"


def test_bad_input_is_one_line_before_anything_runs(kernel, tmp_path):
    run, _ = kernel
    err = _usage_error(run("%%trainguard --memory-limt 1GB\nz = 1"))
    assert "--memory-limt" in err and "--memory-limit" in err and "--timeout" in err
    marker = tmp_path / "ran"
    run(f"fh = open({str(tmp_path / 'data.txt')!r}, 'w')\nimport threading\nlock = threading.Lock()")
    for name in ("fh", "lock"):
        err = _usage_error(run(f"%%trainguard\nopen({str(marker)!r}, 'w').close()\nprint({name})"))
        assert err.startswith(f"{name} cannot be sent"), err
    assert not marker.exists()  # nothing ran
    # a tensor off the CPU (torch's meta device here; a GPU is the same path) is named too
    run("import torch\nnet = torch.nn.Linear(2, 2, device='meta')")
    err = _usage_error(run("%%trainguard\nout = net"))
    assert err.startswith("net cannot be sent") and "meta" in err


def test_names_that_cannot_come_back_are_named_and_the_rest_come_back(kernel):
    run, _ = kernel
    outputs = run(
        "%%trainguard\nimport threading\nguard = threading.Lock()\nkept = [1, 2]\ndef double(v):\n    return 2 * v"
    )
    assert "not returned: guard (a lock" in _text(outputs, "stderr"), outputs
    assert _value(run, "[kept, double(4), 'guard' in globals()]") == [[1, 2], 8, False]
    # a function that came back goes out again by value
    run("%%trainguard\ntwice = double(kept[1])")
    assert _value(run, "twice") == 4


def _results(outputs: list[dict]) -> list[dict]:
    return [o for o in outputs if o["output_type"] == "execute_result"]


def test_the_cells_last_expression_is_its_out(kernel):
    run, _ = kernel
    outputs = run("%%trainguard\nshown = x * 2\n{'twice': shown, 'pid_differs': os.getpid() != KERNEL_PID}")
    [result] = _results(outputs)
    assert result["data"]["text/plain"] == "{'twice': 10, 'pid_differs': True}", outputs
    assert result["execution_count"] is not None  # Out[n], as a cell's value is shown
    assert _value(run, "[_, shown]") == [{"twice": 10, "pid_differs": True}, 10]  # `_` is it
    assert _results(run("%%trainguard\nx * 3;")) == []  # a trailing ; hides it, as IPython does
    # the value of a name that comes back is that name's object; a value that cannot come back
    # is shown by its repr in the worker, with one line saying so
    run("%%trainguard\nrows = [1, 2]\nrows")
    assert _value(run, "_ is rows") is True
    outputs = run("%%trainguard\nimport threading\nthreading.Lock()")
    [result] = _results(outputs)
    assert "unlocked _thread.lock object" in result["data"]["text/plain"], outputs
    note = _text(outputs, "stderr")
    assert note.count("\n") == 1 and "stayed in the worker" in note and "repr" in note, outputs


def test_a_variable_changed_in_place_is_named_and_out_brings_it_back(kernel):
    run, _ = kernel
    run("rows = [1]\nseen = {'a': 1}")
    outputs = run("%%trainguard\nrows.append(2)\nseen['a']\ntotal = len(rows)")
    note = _text(outputs, "stderr")
    assert note.count("\n") == 1 and "changed in place in the worker only" in note, outputs
    assert "rows" in note and "seen" not in note and "--out rows" in note, note
    assert _value(run, "[rows, total]") == [[1], 2]  # the kernel's copy is as it was
    outputs = run("%%trainguard --out rows\nrows.append(3)")
    assert _text(outputs, "stderr") == "", outputs
    assert _value(run, "rows") == [1, 3]


def test_an_ipython_line_in_the_cell_is_one_line_before_anything_runs(kernel, tmp_path):
    run, _ = kernel
    marker = tmp_path / "ran"
    for line in ("%time y2 = 1", "%matplotlib inline", "!echo hi"):
        err = _usage_error(run(f"%%trainguard\nopen({str(marker)!r}, 'w').close()\n{line}"))
        assert err.startswith(f"line 3 of the %%trainguard cell, {line!r}, is IPython syntax"), err
        assert "cell of its own" in err
    assert not marker.exists()
