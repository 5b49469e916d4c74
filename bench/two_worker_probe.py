"""Where the 2-worker tree peak comes from: case (e) of runner_bench.py, taken apart.

    .venv/bin/python bench/two_worker_probe.py --trials 40            # as runner_bench.py (e)
    .venv/bin/python bench/two_worker_probe.py --trials 40 --hog 2    # beside 2 CPU-bound processes

Runs the naive loop's first trials (the denominator of (e): trial 0's peak in a fresh process) and
then ``Runner(workers=2)`` over the same Keras fit, sampling every descendant's RSS at 10 Hz from
outside (the same reader as runner_bench.py, per process instead of summed). It prints:

- one trial's peak (naive trial 0) and the naive child's RSS before its first trial;
- the 2-worker tree peak and its ratio, and at that moment: each process's RSS, which trial each
  worker was in and how far into it;
- each worker's own peak over the run, its first trial's peak, and its RSS between later trials;
- the sum's spread once both workers have run a first trial (a plateau, or peaks that coincide);
- any process in the tree that is not one of the two workers.

The raw series go to bench/results/two_worker_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MIB = 2**20
HERE = Path(__file__).resolve().parent
HOG_PIDS: set[int] = set()


SPLIT: dict[int, list[tuple[float, int, int]]] = {}  # pid -> (time, anon, file) samples


def _per_process(me: int) -> dict[int, int]:
    from trainguard.process.tree import (
        descendants,
        fork_charge_bytes,
        statm_rss_bytes,
        status_split,
        unexeced_fork_parent,
    )

    got: dict[int, int] = {}
    now = time.time()
    for child in descendants(me):
        r = statm_rss_bytes(child)
        if r is None:
            continue
        parent = unexeced_fork_parent(child)
        if parent is not None:
            r = fork_charge_bytes(child, parent)
        if child not in HOG_PIDS:
            got[child] = r
            split = status_split(child)
            if split is not None:
                SPLIT.setdefault(child, []).append((now, split[0], split[1]))
    return got


class PerProcessSampler:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.rows: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.cmdlines: dict[int, str] = {}

    def _loop(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            t = time.time()
            snap = _per_process(me)
            for pid in snap:
                if pid not in self.cmdlines:
                    try:
                        self.cmdlines[pid] = (
                            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
                        )
                    except OSError:
                        self.cmdlines[pid] = "?"
            self.rows.append((t, snap))
            self._stop.wait(max(0.0, self.interval_s - (time.time() - t)))

    def __enter__(self) -> PerProcessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def naive(trials: int) -> dict[str, Any]:
    from trainguard._measured_loop import run_naive

    with PerProcessSampler() as sampler:
        half = run_naive(trials)
    child = next(iter(sampler.cmdlines))
    ready = [v for t, v in half.series]
    return {
        "trial_peaks": list(half.trial_peak_rss_bytes),
        "peak": half.peak_rss_bytes,
        "series": list(half.series),
        "wall_s": half.wall_s,
        "first_sample": ready[0] if ready else None,
        "pid": child,
        "rows": sampler.rows,
    }


def two_workers(trials: int, store: str, runner_kwargs: dict[str, Any]) -> dict[str, Any]:
    from trainguard.runner import Runner
    from trainguard.store import Store
    from trainguard.workloads import keras_fit

    name = f"probe-{os.getpid()}-{time.time():.0f}"
    t0 = time.time()
    with PerProcessSampler() as sampler:
        with Runner(workers=2, store=store, keras_backend="tensorflow", **runner_kwargs) as runner:
            results = list(runner.imap(keras_fit, [{} for _ in range(trials)], name=name))
    wall = time.time() - t0
    with Store(store, readonly=True) as reader:
        run = reader.get_run(name)
        workers = reader.workers(run.run_id)
        attempts = reader.attempts(run.run_id)
        events = reader.events(run.run_id)
    return {
        "wall_s": wall,
        "rows": sampler.rows,
        "cmdlines": sampler.cmdlines,
        "workers": [
            {"id": w.worker_id, "pid": w.pid, "start": w.started_at, "end": w.ended_at, "reason": w.reason}
            for w in workers
        ],
        "attempts": [
            {
                "index": a.index,
                "worker": a.worker_id,
                "start": a.started_at,
                "end": a.finished_at,
                "peak": a.peak_rss_bytes,
            }
            for a in attempts
        ],
        "events": [{"kind": e.kind, "message": e.message} for e in events],
        "trial_peaks": [r.peak_rss_bytes for r in results],
    }


def _split_at(pid: int, at: float) -> str:
    samples = SPLIT.get(pid) or []
    if not samples:
        return "no split"
    t, anon, file_ = min(samples, key=lambda s: abs(s[0] - at))
    return f"anon {anon / MIB:.0f} + file {file_ / MIB:.0f} MiB"


def analyse(nv: dict[str, Any], tw: dict[str, Any]) -> list[str]:
    single = nv["trial_peaks"][0]
    out = [
        f"naive: trial peaks {[round(p / MIB) for p in nv['trial_peaks']]} MiB; first sample {nv['first_sample'] / MIB:.0f} MiB"
    ]
    at0 = next((t for t, s in nv["rows"] if s.get(nv["pid"], 0) >= single - MIB), None)
    if at0 is not None:
        out.append(f"   naive trial 0 at its peak: {_split_at(nv['pid'], at0)}")
    rows = tw["rows"]
    sums = [(t, sum(s.values()), s) for t, s in rows]
    t_peak, peak, snap = max(sums, key=lambda r: r[1])
    out.append(
        f"2 workers: tree peak {peak / MIB:.0f} MiB = {peak / single:.3f} x single {single / MIB:.0f} MiB; wall {tw['wall_s']:.1f} s"
    )
    pid_to_worker = {w["pid"]: w["id"] for w in tw["workers"]}
    by_worker_attempts: dict[int, list[dict[str, Any]]] = {}
    for a in tw["attempts"]:
        by_worker_attempts.setdefault(a["worker"], []).append(a)
    for pid, rss in sorted(snap.items()):
        wid = pid_to_worker.get(pid)
        where = ""
        if wid is not None:
            inside = [
                a for a in by_worker_attempts.get(wid, []) if a["start"] <= t_peak <= (a["end"] or 1e18)
            ]
            if inside:
                a = inside[0]
                where = f"in trial {a['index']} at {t_peak - a['start']:.2f} s of {((a['end'] or t_peak) - a['start']):.2f} s"
            else:
                where = "between trials"
        out.append(f"   pid {pid} worker {wid}: {rss / MIB:.0f} MiB {where}; {_split_at(pid, t_peak)}")
    # each worker's own series
    for w in tw["workers"]:
        series = [(t, s[w["pid"]]) for t, s in rows if s.get(w["pid"])]  # 0: exited, not reaped yet
        if not series:
            continue
        own_peak = max(v for _, v in series)
        atts = sorted(by_worker_attempts.get(w["id"], []), key=lambda a: a["start"])
        after_first = atts[0]["end"] or 1e18 if atts else 1e18
        idle = [
            v
            for t, v in series
            if t > after_first and not any(a["start"] <= t <= (a["end"] or 1e18) for a in atts)
        ]
        first = atts[0] if atts else None
        first_peak = max(
            (v for t, v in series if first and first["start"] <= t <= (first["end"] or 1e18)), default=0
        )
        between = f"{sorted(idle)[len(idle) // 2] / MIB:.0f} MiB" if idle else "- (no sample)"
        out.append(
            f"   worker {w['id']} pid {w['pid']}: {len(atts)} trials, own peak {own_peak / MIB:.0f} MiB "
            f"({own_peak / single:.3f} x), first trial peak {first_peak / MIB:.0f}, "
            f"between later trials median {between}, reason {w['reason']}"
        )
    # the sum once both workers have finished a first trial, until the first ends: a plateau or peaks?
    pids = [w["pid"] for w in tw["workers"]]
    firsts = [
        min((a["end"] or 1e18) for a in by_worker_attempts.get(w["id"], [{"end": None}]))
        for w in tw["workers"]
    ]
    ends = [w["end"] or 1e18 for w in tw["workers"]]
    steady = sorted(sum(s.get(p, 0) for p in pids) for t, s in rows if max(firsts) < t < min(ends))
    if steady:
        out.append(
            f"   sum after both first trials ({len(steady)} of {len(rows)} samples): min {steady[0] / MIB:.0f}, "
            f"median {steady[len(steady) // 2] / MIB:.0f}, max {steady[-1] / MIB:.0f} MiB"
        )
    others = {p for _, s in rows for p in s} - set(pids)
    for p in sorted(others):
        mx = max(s.get(p, 0) for _, s in rows)
        out.append(f"   other process {p}: max {mx / MIB:.0f} MiB [{tw['cmdlines'].get(p, '?')[:90]}]")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--naive-trials", type=int, default=3)
    parser.add_argument("--hog", type=int, default=0, help="CPU-bound processes to run beside")
    parser.add_argument("--kw", default="{}", help="Runner kwargs as JSON")
    parser.add_argument("--out", default=str(HERE / "results" / "two_worker_probe.json"))
    args = parser.parse_args()
    # CPU-bound neighbours; excluded from the measured tree by pid
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    HOG_PIDS.update(h.pid for h in hogs)
    try:
        store = os.path.join(tempfile.mkdtemp(prefix="tg-probe-"), "s.db")
        nv = naive(args.naive_trials)
        tw = two_workers(args.trials, store, json.loads(args.kw))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    lines = analyse(nv, tw)
    print(f"load1 {os.getloadavg()[0]:.2f}, hogs {args.hog}")
    print("\n".join(lines))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"naive": nv, "two": tw, "hog": args.hog}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
