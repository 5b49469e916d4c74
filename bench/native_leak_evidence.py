"""Calls to verdict for native leaks (memory kept through ctypes malloc, 256/64/16 KiB a call,
with 5.7 MiB of temporaries malloc'd and freed around it each call), native temporaries alone and
a flat fast step (np.ones(32768).sum() at --max-time 20s): the leak check with the allocator's
bytes in use as evidence ("after") and without them ("before": ``allocator_evidence=False``, the
check as it was), side by side in one run, each case in its own fresh process, alternating.

Run: .venv/bin/python bench/native_leak_evidence.py [--runs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

STEPS = Path(__file__).resolve().parents[1] / "tests" / "integration" / "native_steps.py"

CASES = [
    ("native leak 256 KiB/call", "native_leak", "256", "60s", "leak"),
    ("native leak 64 KiB/call", "native_leak", "64", "60s", "leak"),
    ("native leak 16 KiB/call", "native_leak", "16", "60s", "leak"),
    ("native temporaries only", "native_temporaries", "64", "30s", "no leak"),
    ("flat fast step, 20 s", "flat_fast", "64", "20s", "no leak"),
]

_RUN = """
import json, sys
sys.path.insert(0, {folder!r})
import native_steps, trainguard
r = trainguard.leakcheck(getattr(native_steps, {step!r}), max_time={budget!r}, allocator_evidence={after!r})
print(json.dumps({{"verdict": r.verdict.value, "iterations": r.iterations, "elapsed_s": r.elapsed_s,
                   "reason": r.reason, "allocator": r.allocator}}))
"""


def one(step: str, kib: str, budget: str, after: bool) -> dict:
    code = _RUN.format(folder=str(STEPS.parent), step=step, budget=budget, after=after)
    env = dict(os.environ, TG_NATIVE_KIB=kib)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for name, step, kib, budget, expected in CASES:
        got: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.runs):
            for label in ("before", "after"):  # alternating, so load hits both alike
                got[label].append(one(step, kib, budget, label == "after"))
        row = {"case": name, "expected": expected}
        for label, runs in got.items():
            row[label] = {
                "verdicts": [r["verdict"] for r in runs],
                "calls": [r["iterations"] for r in runs],
                "median_calls": statistics.median(r["iterations"] for r in runs),
                "median_s": round(statistics.median(r["elapsed_s"] for r in runs), 1),
            }
        row["after_reason"] = got["after"][-1]["reason"]
        rows.append(row)
        b, a = row["before"], row["after"]
        print(
            f"{name:28s} before {'/'.join(b['verdicts']):30s} calls {b['calls']}  |  "
            f"after {'/'.join(a['verdicts']):30s} calls {a['calls']}",
            flush=True,
        )
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
        "python": platform.python_version(),
        "load": os.getloadavg(),
        "runs": args.runs,
    }
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
