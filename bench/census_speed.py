"""How long a census takes: an empty baseline, 100k torch tensors, 100k numpy arrays.

Each configuration runs in a fresh interpreter (so heaps do not mix), holds its objects, and
times ``census()`` (best and median of several runs), with and without the numpy pass.

    .venv/bin/python bench/census_speed.py [--n 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import gc, json, sys, time
n, kind, repeat = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
import numpy as np
held = []
if kind in ("torch", "torch+numpy"):
    import torch
    held += [torch.zeros(4) for _ in range(n)]
if kind in ("numpy", "torch+numpy"):
    held += [np.zeros(4) for _ in range(n)]
from trainguard.probes.census import census
census()
gc.collect()
out = {"gc_objects": len(gc.get_objects())}
for label, kwargs in (("census()", {}), ("census(numpy=False)", {"numpy": False})):
    times = []
    for _ in range(repeat):
        c = census(**kwargs)
        times.append(c.elapsed_s)
    out[label] = {"best_s": min(times), "median_s": sorted(times)[len(times) // 2], "total_count": c.total_count}
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for kind in ("empty (numpy imported)", "empty (torch imported)", "torch", "numpy"):
        arg = {"empty (numpy imported)": "none", "empty (torch imported)": "torch0"}.get(kind, kind)
        code = CHILD
        if arg == "torch0":
            code = CHILD.replace("held = []", "held = []\nimport torch")
        proc = subprocess.run(
            [sys.executable, "-c", code, str(args.n), arg, str(args.repeat)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    import numpy

    try:
        import importlib.metadata as md

        torch_version = md.version("torch")
    except Exception:
        torch_version = "absent"
    base = results["empty (torch imported)"]["census()"]["median_s"]
    print(
        f"census() speed, {args.n:,} objects held, median of {args.repeat}; Python {platform.python_version()}, "
        f"numpy {numpy.__version__}, torch {torch_version}, {dt.date.today()}\n"
    )
    print(
        "| process holds | live GC objects | census() median | best | vs empty torch process | census(numpy=False) median |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, r in results.items():
        full, nonp = r["census()"], r["census(numpy=False)"]
        print(
            f"| {kind}{'' if kind.startswith('empty') else f' x {args.n:,}'} | {r['gc_objects']:,} | "
            f"{1000 * full['median_s']:.0f} ms | {1000 * full['best_s']:.0f} ms | "
            f"{full['median_s'] / base:.1f}x | {1000 * nonp['median_s']:.0f} ms |"
        )
    out = Path(__file__).with_name("results") / "census_speed.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"date": str(dt.datetime.now()), "n": args.n, "results": results}, indent=2))


if __name__ == "__main__":
    main()
