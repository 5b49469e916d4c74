"""Benchmark: per-trial dispatch cost of a Node worker next to a Python worker, and of command trials.

    .venv/bin/python bench/node_dispatch.py              # ~1 minute
    .venv/bin/python bench/node_dispatch.py --trials 100 --rounds 3

Each configuration runs ``--trials`` trivial trials through one ``Runner.map`` with one worker,
and one trial alone; the difference divided by the extra trials is the cost per trial with the
worker's start taken out (the one-trial run pays the start). The configurations alternate, round
after round, so that all of them see the same (noisy) machine; the median round is reported.
Needs ``node`` and, for the TF.js row, ``npm ci`` in js/trainguard (scripts/test.sh does it).
Writes bench/results/node_dispatch.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def trivial(params):
    return {"i": params["i"]}


def _timed(fn, n: int) -> float:
    import trainguard

    with trainguard.Runner(workers=1, store=None) as runner:
        t0 = time.perf_counter()
        results = runner.map(fn, [{"i": i} for i in range(n)])
        elapsed = time.perf_counter() - t0
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--command-trials", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import trainguard

    js = HERE / "node_trivial.js"
    node_script = HERE / "node_command.js"
    node_script.write_text(
        "const p = JSON.parse(require('fs').readFileSync(process.env.TRAINGUARD_PARAMS_FILE, 'utf8'));\n"
        "console.log('TRAINGUARD_RESULT ' + JSON.stringify({ i: p.i }));\n"
    )
    configs = {
        "Python worker (function)": ("node_dispatch:trivial", args.trials),
        "Node worker (function)": (f"{js}:trivial", args.trials),
        "Node worker, TF.js loaded": (f"{js}:tfjs_trivial", args.trials),
        "command trial, python -c": (
            trainguard.Command(
                [
                    sys.executable,
                    "-c",
                    "import json,sys; p=json.load(sys.stdin); print('TRAINGUARD_RESULT', json.dumps(p))",
                ]
            ),
            args.command_trials,
        ),
        "command trial, node script": (trainguard.Command(["node", str(node_script)]), args.command_trials),
    }
    if not (ROOT / "js" / "trainguard" / "node_modules" / "@tensorflow" / "tfjs").is_dir():
        del configs["Node worker, TF.js loaded"]
    os.environ["NODE_PATH"] = str(ROOT / "js" / "trainguard" / "node_modules")
    per_trial: dict[str, list[float]] = {k: [] for k in configs}
    start: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(args.rounds):
        for name, (fn, n) in configs.items():
            one = _timed(fn, 1)
            many = _timed(fn, n + 1)
            per_trial[name].append((many - one) / n)
            start[name].append(one)
    rows = []
    base = statistics.median(per_trial["Python worker (function)"])
    print("| trials run by | per-trial dispatch | vs Python worker | one-trial run (start included) |")
    print("| --- | ---: | ---: | ---: |")
    for name in configs:
        med = statistics.median(per_trial[name])
        rows.append(
            {
                "config": name,
                "per_trial_s": med,
                "ratio": med / base,
                "one_trial_s": statistics.median(start[name]),
            }
        )
        print(
            f"| {name} | {med * 1e3:.2f} ms | {med / base:.1f} x | {statistics.median(start[name]):.2f} s |"
        )
    node_version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    out = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "node": node_version,
        "trials": args.trials,
        "command_trials": args.command_trials,
        "rounds": args.rounds,
        "rows": rows,
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "node_dispatch.json").write_text(json.dumps(out, indent=2))
    node_script.unlink()


if __name__ == "__main__":
    main()
