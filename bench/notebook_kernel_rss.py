"""Kernel RSS over repeated ``%%trainguard`` cells that fit the seed's Keras model (a real Jupyter kernel).

Each cell is the README's cell at the seed's size (Dense(2000) -> Dense(2000) -> Dense(1) on
5000 x 100, 1 epoch, batch 32, TensorFlow backend). Prints the kernel's RSS before and after each
cell and which frameworks the kernel has loaded at the end.

    .venv/bin/python bench/notebook_kernel_rss.py --cells 4
    .venv/bin/python bench/notebook_kernel_rss.py --src /path/to/an/older/src   # another version
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import nbclient
import nbformat

CELL = """%%trainguard --memory-limit 4GB --keras-backend tensorflow
import keras
model = keras.Sequential([keras.layers.Input((100,)), keras.layers.Dense(units, activation="relu"),
                          keras.layers.Dense(units, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
loss = model.fit(x, y, epochs=1, batch_size=32, verbose=0).history["loss"][-1]
print("loss", loss)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--units", type=int, default=2000)
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    args = parser.parse_args()
    nb = nbformat.v4.new_notebook()
    env = {**os.environ, "PYTHONPATH": args.src}
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True)

    def run(source: str) -> str:
        nb.cells.append(nbformat.v4.new_code_cell(source))
        client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
        return "".join(o.get("text", "") for o in nb.cells[-1].outputs if o["output_type"] == "stream")

    def rss_mib() -> float:
        return float(json.loads(run("print(json.dumps(psutil.Process().memory_info().rss / 2**20))")))

    with client.setup_kernel(env=env):
        run(
            "%load_ext trainguard\nimport gc, json, sys, psutil, numpy as np\n"
            "x = np.random.rand(5000, 100).astype('float32')\ny = np.random.rand(5000, 1).astype('float32')\n"
            f"units = {args.units}"
        )
        figures = [rss_mib()]
        for i in range(args.cells):
            out = run(CELL)
            figures.append(rss_mib())
            print(f"cell {i + 1}: kernel RSS {figures[-1]:.0f} MiB; {out.strip()[-200:]!r}", flush=True)
        loaded = run("print(sorted(m for m in ('tensorflow', 'keras', 'torch', 'jax') if m in sys.modules))")
        print("kernel RSS MiB:", " -> ".join(f"{v:.0f}" for v in figures))
        print(
            f"growth over {args.cells} cells: {figures[-1] - figures[0]:+.0f} MiB; frameworks in the kernel: {loaded.strip()}"
        )


if __name__ == "__main__":
    main()
