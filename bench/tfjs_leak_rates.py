"""False leaks of clean TF.js steps, and detection of leaking ones, through ``trainguard leakcheck``
with its default options, repeated: the corpus's TF.js cases (bench/leak_corpus/tfjs_*.js).

Run: .venv/bin/python bench/tfjs_leak_rates.py [--runs 20] [--hog N] [--leaks] [--before SRC] [--only NAME ...]

Each run is one ``trainguard leakcheck CASE.js:step --setup setup --json`` (the corpus runner's
``run_case``, NODE_PATH=js/trainguard/node_modules), one case after the other, round after round,
so load and warm caches spread over every case alike. ``--hog N`` runs N CPU-bound processes beside
the whole run (a loaded machine); ``--before SRC`` runs every case a second time with
PYTHONPATH=SRC (a checkout's src/ of the detector before a change, whose js/ is beside it),
alternating with this tree. A clean case's false leak is a ``leak`` verdict (``inconclusive`` is
counted apart); a leaking case's miss is anything but ``leak``. Rates with a 95 % Wilson interval.
Writes bench/results/tfjs_leak_rates[_TAG].json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from leak_corpus_run import CORPUS, RESULTS, constants, run_case  # noqa: E402
from leak_false_rate import wilson  # noqa: E402


def _node_versions() -> str:
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    pkg = HERE.parent / "js" / "trainguard" / "node_modules" / "@tensorflow" / "tfjs" / "package.json"
    tfjs = json.loads(pkg.read_text())["version"] if pkg.is_file() else "?"
    return f"Node {node}, @tensorflow/tfjs {tfjs}"


def _rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} ({100 * k / max(n, 1):.0f} %, 95 % CI {100 * lo:.0f}-{100 * hi:.0f} %)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20, help="runs of each case")
    ap.add_argument("--hog", type=int, default=0, help="CPU-bound processes beside the whole run")
    ap.add_argument("--leaks", action="store_true", help="also run the leaking TF.js cases")
    ap.add_argument("--before", metavar="SRC", default=None, help="also run each case with PYTHONPATH=SRC")
    ap.add_argument("--only", nargs="*", default=None, help="case names (file stems)")
    ap.add_argument("--tag", default="", help="suffix of the results file name")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    cases = sorted(CORPUS.glob("tfjs_*.js"))
    if args.only:
        cases = [p for p in cases if p.stem in set(args.only)]
    if not args.leaks:
        cases = [p for p in cases if constants(p).get("EXPECTED") != "leak"]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    rows: list[dict] = []
    t0 = time.time()
    try:
        for i in range(args.runs):
            for p in cases:
                for tree, src in (("after", None), ("before", args.before)):
                    if tree == "before" and src is None:
                        continue
                    row = run_case(p, extra, src)
                    row["tree"], row["round"] = tree, i
                    rows.append(row)
                    print(
                        f"round {i + 1}/{args.runs} {p.stem} [{tree}]: {row.get('verdict')} at "
                        f"{row.get('iterations')} calls, {row['wall_s']:.0f} s, load {row['load1']}",
                        flush=True,
                    )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    summary = _summarize(rows)
    print(f"\n# TF.js leak check, default options: {args.runs} runs of each case\n")
    print(
        f"{datetime.date.today()}, {_node_versions()}, Python {platform.python_version()}"
        + (f", beside {args.hog} CPU-bound processes" if args.hog else "")
    )
    print("\n| case | expected | tree | verdicts | wrong | median calls | median wall s | median load |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for line in summary["table"]:
        print(line)
    for tree, (k, n) in summary["false"].items():
        print(f"\nfalse leaks on clean cases [{tree}]: {_rate(k, n)}")
    for tree, (k, n) in summary["missed"].items():
        print(f"missed leaks [{tree}]: {_rate(k, n)}")
    print(f"total wall {time.time() - t0:.0f} s")
    RESULTS.mkdir(exist_ok=True)
    name = "tfjs_leak_rates" + (f"_{args.tag}" if args.tag else "") + ".json"
    (RESULTS / name).write_text(
        json.dumps({"date": str(datetime.date.today()), "hog": args.hog, "rows": rows}, indent=1, default=str)
    )


def _summarize(rows: list[dict]) -> dict:
    import statistics

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["case"], r["tree"])].append(r)
    table, false, missed = [], defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for (case, tree), rs in sorted(groups.items()):
        expected = rs[0].get("EXPECTED")
        verdicts: dict[str, int] = defaultdict(int)
        for r in rs:
            verdicts[r.get("verdict")] += 1
        if expected == "leak":
            wrong = sum(1 for r in rs if r.get("verdict") != "leak")
            missed[tree][0] += wrong
            missed[tree][1] += len(rs)
        else:
            wrong = verdicts.get("leak", 0)
            false[tree][0] += wrong
            false[tree][1] += len(rs)
        calls = [r["iterations"] for r in rs if r.get("iterations") is not None]
        vtext = ", ".join(f"{v} {c}" for v, c in sorted(verdicts.items()))
        table.append(
            f"| {case} | {expected} | {tree} | {vtext} | {wrong} | {statistics.median(calls) if calls else '-'} | "
            f"{statistics.median(r['wall_s'] for r in rs):.0f} | {statistics.median(r['load1'] for r in rs):.1f} |"
        )
    return {
        "table": table,
        "false": {k: tuple(v) for k, v in false.items()},
        "missed": {k: tuple(v) for k, v in missed.items()},
    }


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
