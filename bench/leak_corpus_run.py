"""Run every case of bench/leak_corpus/ through the CLI exactly as a user would, and score the verdicts.

Run: .venv/bin/python bench/leak_corpus_run.py [--only NAME ...] [--jobs 1] [--hog N] [-- extra leakcheck args]

Each case is ``trainguard leakcheck CASE.py:step --setup setup --json`` (or ``CASE.js:step``, a
TF.js step in Node, which finds @tensorflow/tfjs through ``NODE_PATH=js/trainguard/node_modules``,
installed by scripts/test.sh) with default options (a case without a ``setup`` function gets a
warning from the CLI and runs without one). A case's
``EXPECTED`` is ``leak`` or ``no_leak``; the verdicts ``no_leak`` and ``plateau`` both count as
"not a leak", ``inconclusive`` counts as wrong either way. Prints a markdown table and the accuracy;
writes the table to bench/results/leak_corpus_run.json and each full report to
bench/results/leak_corpus/CASE.json. ``--hog N`` runs N CPU-bound processes beside the whole run
(a loaded machine: N=4 on 2 cores reads a load average of about 4-6) and records the load average
at each case's end.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "leak_corpus"
RESULTS = HERE / "results"


JS_MODULES = HERE.parent / "js" / "trainguard" / "node_modules"


def constants(path: Path) -> dict[str, str]:
    if path.suffix == ".js":  # const EXPECTED = 'leak'; const SOURCE = '...';
        found = re.findall(r"^const (EXPECTED|SOURCE) = '([^']*)';", path.read_text(), re.M)
        return dict(found)
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("EXPECTED", "SOURCE") and isinstance(node.value, ast.Constant):
                out[node.targets[0].id] = node.value.value
    return out


def fmt_bytes(v: float | None) -> str:
    """The units of leakcheck's own table and text (binary: KiB, MiB), so the figures agree."""
    if v is None:
        return "-"
    from trainguard.units import format_bytes

    return format_bytes(v, signed=True)


def run_case(path: Path, extra: list[str], src: str | None = None) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "trainguard",
        "leakcheck",
        f"{path}:step",
        "--setup",
        "setup",
        "--json",
        *extra,
    ]
    t0 = time.perf_counter()
    env = dict(os.environ)
    if path.suffix == ".js":
        env["NODE_PATH"] = str(JS_MODULES)
    if src:  # another source tree (e.g. the detector before a change), compared in the same run
        env["PYTHONPATH"] = src
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    wall = time.perf_counter() - t0
    row = {"case": path.stem, **constants(path), "exit": res.returncode, "wall_s": wall}
    row["load1"] = round(os.getloadavg()[0], 2)
    try:
        data = json.loads(res.stdout)
    except json.JSONDecodeError:
        row.update(verdict="error", reason=res.stderr.strip().splitlines()[-1:] or ["?"])
        row["reason"] = row["reason"][0]
        return row
    (RESULTS / "leak_corpus").mkdir(parents=True, exist_ok=True)
    name = path.stem + ("_before" if src else "")
    (RESULTS / "leak_corpus" / f"{name}.json").write_text(json.dumps(data))
    row.update(
        verdict=data["verdict"],
        metric=data.get("metric"),
        slope=data.get("slope_bytes_per_iter"),
        ci=(data.get("ci_low_bytes_per_iter"), data.get("ci_high_bytes_per_iter")),
        iterations=data.get("iterations"),
        elapsed_s=data.get("elapsed_s"),
        reason=data.get("reason"),
        counts=(data.get("counts") or {}).get("status"),
        censuses=(data.get("counts") or {}).get("censuses"),
        census_median_s=(data.get("counts") or {}).get("census_median_s"),
    )
    return row


def correct(row: dict) -> bool:
    v = row.get("verdict")
    if row.get("EXPECTED") == "leak":
        return v == "leak"
    return v in ("no_leak", "plateau")


def print_side_by_side(rows: list[dict], before: dict[str, dict]) -> None:
    print(
        "| case | expected | before: verdict | calls | wall s | after: verdict | calls | wall s | counts | right before / after |"
    )
    print("|---|---|---|---:|---:|---|---:|---:|---|---|")
    for r in rows:
        b = before[r["case"]]
        print(
            f"| {r['case']} | {r.get('EXPECTED')} | {b.get('verdict')} | {b.get('iterations', '-')} | {b['wall_s']:.1f} | "
            f"{r.get('verdict')} | {r.get('iterations', '-')} | {r['wall_s']:.1f} | {r.get('counts') or '-'} | "
            f"{'yes' if correct(b) else 'no'} / {'yes' if correct(r) else '**no**'} |"
        )
    ok_b = sum(correct(b) for b in before.values())
    ok_a = sum(correct(r) for r in rows)
    print(f"\nright: before {ok_b}/{len(rows)}, after {ok_a}/{len(rows)}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None, help="case names (file stems) to run")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (1 keeps timings honest)")
    ap.add_argument("--tag", default="", help="suffix of the results file name")
    ap.add_argument(
        "--before",
        metavar="SRC",
        default=None,
        help="also run every case with PYTHONPATH=SRC (a checkout's src/ of the detector before a "
        "change), alternating with this tree, and print both side by side",
    )
    ap.add_argument("--hog", type=int, default=0, help="CPU-bound processes to run beside the whole run")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    try:
        run_all(args, extra)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def run_all(args: argparse.Namespace, extra: list[str]) -> None:
    cases = sorted(p for p in [*CORPUS.glob("*.py"), *CORPUS.glob("*.js")] if not p.name.startswith("_"))
    if args.only:
        cases = [p for p in cases if p.stem in set(args.only)]
    t0 = time.time()
    before: dict[str, dict] = {}
    if args.before:
        rows = []
        for p in cases:  # alternate, so both trees see the same machine load
            before[p.stem] = run_case(p, extra, args.before)
            rows.append(run_case(p, extra))
            print(
                f"{p.stem}: before {before[p.stem].get('verdict')} at {before[p.stem].get('iterations')} calls, "
                f"after {rows[-1].get('verdict')} at {rows[-1].get('iterations')} calls",
                flush=True,
            )
    else:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = list(pool.map(lambda p: run_case(p, extra), cases))
    total = time.time() - t0
    if before:
        print_side_by_side(rows, before)
    import trainguard

    print(
        f"# leak corpus: {len(rows)} cases through `trainguard leakcheck FILE.py:step --setup setup --json`\n"
    )
    print(
        f"{datetime.date.today()}, trainguard {getattr(trainguard, '__version__', '?')}, Python {platform.python_version()}"
    )
    if extra:
        print(f"extra arguments: {' '.join(extra)}")
    if args.hog:
        print(f"beside {args.hog} CPU-bound processes")
    print()
    print(
        "| case | expected | verdict | metric | slope /iter | 95 % CI | iterations | wall s | load | correct |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ci = r.get("ci") or (None, None)
        print(
            f"| {r['case']} | {r.get('EXPECTED')} | {r.get('verdict')} | {r.get('metric', '-')} | {fmt_bytes(r.get('slope'))} | "
            f"{fmt_bytes(ci[0])} .. {fmt_bytes(ci[1])} | {r.get('iterations', '-')} | {r['wall_s']:.1f} | "
            f"{r.get('load1', '-')} | {'yes' if correct(r) else '**no**'} |"
        )
    ok = sum(correct(r) for r in rows)
    print(f"\naccuracy {ok}/{len(rows)} = {ok / max(len(rows), 1):.0%}; total wall {total:.0f} s")
    for r in rows:
        if not correct(r):
            print(f"- {r['case']}: {r.get('verdict')}: {r.get('reason')}")
    RESULTS.mkdir(exist_ok=True)
    name = "leak_corpus_run" + (f"_{args.tag}" if args.tag else "") + ".json"
    (RESULTS / name).write_text(
        json.dumps(
            {
                "date": str(datetime.date.today()),
                "extra": extra,
                "hog": args.hog,
                "rows": rows,
                "before": before,
                "wall_s": total,
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
