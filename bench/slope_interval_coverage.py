"""How often the slope's 95 % interval misses a flat series' true slope (0), and how often its
trend test calls a flat series growing at the 1 % and 0.1 % levels, by series length and noise.

Run: .venv/bin/python bench/slope_interval_coverage.py [--series 4000] [--before OLD/src]

``trainguard.leaks.stats.robust_slope`` is the statistic the leak check, ``compare``, the run
report and the Keras callback share. Nominal: the interval misses 5 % of the time (2.5 % each
side); the one-sided test rejects 1 % and 0.1 % of flat series. Noise models (seeded, the same
series for every tree):

* ``iid``: white Gaussian noise;
* ``bench``: bench/leak_detection.py's model: half white, half AR(1) with phi = 0.5, 3 % spikes;
* ``ar0.8``: AR(1) with phi = 0.8 (allocator state held for several readings).

With ``--before``, each row is computed in a fresh process for that tree's ``src`` too, and the
two are printed side by side (the figures are not timings: one run is enough).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

LENGTHS = (6, 10, 20, 40, 136)
NOISES = ("iid", "bench", "ar0.8")


def flat_series(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "iid":
        return rng.normal(0.0, 1.0, n)
    if kind == "bench":
        from leak_false_rate import noise

        return noise(rng, n, 2.0)
    phi = 0.8
    a = np.zeros(n)
    a[0] = rng.normal()
    for t in range(1, n):
        a[t] = phi * a[t - 1] + rng.normal(0.0, np.sqrt(1 - phi * phi))
    return a


def measure(series: int) -> dict[str, dict[int, dict[str, float]]]:
    from trainguard.leaks.stats import robust_slope

    out: dict[str, dict[int, dict[str, float]]] = {}
    for kind in NOISES:
        out[kind] = {}
        for n in LENGTHS:
            miss = p01 = p001 = 0
            for seed in range(series):
                est = robust_slope(flat_series(kind, n, seed))
                miss += (est.ci_low > 0) + (est.ci_high < 0)
                p01 += est.p_increase < 0.01
                p001 += est.p_increase < 0.001
            out[kind][n] = {"miss": miss / series, "p01": p01 / series, "p001": p001 / series}
    return out


def _in_tree(src: str, series: int) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    res = subprocess.run(
        [sys.executable, __file__, "--series", str(series), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    raw = json.loads(res.stdout)
    return {k: {int(n): v for n, v in rows.items()} for k, rows in raw.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=4000, help="flat series per noise and length")
    ap.add_argument("--before", default=None, help="another tree's src folder, printed beside this one")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure(args.series)))
        return
    after = _in_tree(str(Path(__file__).resolve().parents[1] / "src"), args.series)
    before = _in_tree(args.before, args.series) if args.before else None
    print(f"{args.series} flat series per row; nominal: miss 5 %, P(p < 1 %) 1 %, P(p < 0.1 %) 0.1 %\n")
    head = "| noise | n | interval misses | P(p < 1 %) | P(p < 0.1 %) |"
    if before:
        head = "| noise | n | interval misses, before / after | P(p < 1 %), before / after | P(p < 0.1 %), before / after |"
    print(head)
    print("|---|---:|---:|---:|---:|")
    for kind in NOISES:
        for n in LENGTHS:
            a = after[kind][n]
            cells = []
            for key in ("miss", "p01", "p001"):
                cell = f"{a[key]:.2%}"
                if before:
                    cell = f"{before[kind][n][key]:.2%} / {cell}"
                cells.append(cell)
            print(f"| {kind} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
