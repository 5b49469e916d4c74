"""Ctrl-C in a caller running many one-second tasks on two workers: the time from SIGINT to the
caller's exit, the tasks that ran, and whether any worker outlived it.

    .venv/bin/python bench/joblib_interrupt.py --runs 5
    .venv/bin/python bench/joblib_interrupt.py --runs 5 --src BEFORE/src   # another tree's code
    .venv/bin/python bench/joblib_interrupt.py --ignored                   # SIGINT inherited ignored

Cases: ``joblib`` (``Parallel`` on the trainguard backend, with a store), ``runner``
(``Runner.map``), ``cli`` (``trainguard run``), and ``loky`` (joblib's own backend, for
comparison). Each run starts ``tests/integration/interrupt_tasks.py`` (120 tasks; each leaves a
marker file named after the pid that ran it) with SIGINT at its default action, as in a terminal,
waits until two tasks have started, sends SIGINT to the caller alone, and times ``wait()``.

``--ignored`` starts each joblib case once with SIGINT ignored, as a non-interactive shell hands it
to a command it puts in the background (``python script.py & kill -INT $!``): Python then leaves
it ignored, and any backend runs every task and exits 0 (12 tasks here, so that it ends soon).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tests" / "integration" / "interrupt_tasks.py"
TOTAL = 120


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _argv(case: str, folder: Path, total: int) -> list[str]:
    markers, store = folder / "markers", folder / "runs.db"
    if case != "cli":
        return [sys.executable, str(TASKS), case, str(markers), str(store), str(total)]
    params = folder / "params.json"
    params.write_text(json.dumps([{"i": i, "dir": str(markers)} for i in range(total)]))
    return [sys.executable, "-m", "trainguard", "run", f"{TASKS}:trial", "--params", str(params)] + [
        "--store",
        str(store),
        "--name",
        "interrupt",
        "--no-progress",
    ]


def _workers_of(store: Path) -> set[int]:
    if not store.exists():
        return set()
    from trainguard.store import Store

    with Store(store, readonly=True) as s:
        return {w.pid for run in s.list_runs() for w in s.workers(run.run_id) if w.pid}


def one_run(case: str, env: dict[str, str], sigint: object, total: int = TOTAL) -> dict[str, object]:
    """One interrupted (or, with SIGINT ignored, signalled) run of ``case``."""
    with tempfile.TemporaryDirectory(prefix="tg-interrupt-") as tmp:
        folder = Path(tmp)
        markers = folder / "markers"
        markers.mkdir()
        proc = subprocess.Popen(
            _argv(case, folder, total),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),  # type: ignore[arg-type]
        )
        while len(list(markers.iterdir())) < 2:
            if proc.poll() is not None:
                raise SystemExit(f"{case}: ended before two tasks started:\n{proc.stderr.read()[-3000:]}")
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate()
        exit_s = time.monotonic() - sent
        pids = {int(p.name.split("-")[1]) for p in markers.iterdir()} | _workers_of(folder / "runs.db")
        time.sleep(0.5)  # a worker the caller's exit left behind has had time to be seen
        last = err.strip().splitlines()[-1] if err.strip() else ""
        return {
            "case": case,
            "exit_s": round(exit_s, 3),
            "returncode": proc.returncode,
            "last_line": last[:80],
            "tasks_ran": len(list(markers.iterdir())),
            "workers_left": sorted(p for p in pids if _alive(p)),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cases", default="joblib,runner,cli,loky")
    parser.add_argument("--src", help="run another tree's trainguard (its src folder)")
    parser.add_argument(
        "--ignored", action="store_true", help="SIGINT inherited ignored, once per joblib case"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "joblib_interrupt.json"))
    args = parser.parse_args()
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(args.src), env.get("PYTHONPATH", "")])
    rows = []
    if args.ignored:
        for case in ("joblib", "loky"):
            row = one_run(case, env, signal.SIG_IGN, total=12)
            print(json.dumps({**row, "sigint": "ignored"}), flush=True)
            rows.append({**row, "sigint": "ignored"})
    else:
        for _ in range(args.runs):  # the cases alternate, so that load falls on each alike
            for case in args.cases.split(","):
                row = one_run(case, env, signal.SIG_DFL)
                print(json.dumps(row), flush=True)
                rows.append(row)
        print(
            f"\n| case | SIGINT to exit, median (max) of {args.runs} | tasks ran of {TOTAL} | workers left |"
        )
        print("| --- | --- | --- | --- |")
        for case in args.cases.split(","):
            mine = [r for r in rows if r["case"] == case]
            times = [float(r["exit_s"]) for r in mine]  # type: ignore[arg-type]
            ran = [int(r["tasks_ran"]) for r in mine]  # type: ignore[call-overload]
            left = sum(len(r["workers_left"]) for r in mine)  # type: ignore[arg-type]
            print(
                f"| {case} | {statistics.median(times):.2f} s ({max(times):.2f} s) | "
                f"{min(ran)}–{max(ran)} | {left} |"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
