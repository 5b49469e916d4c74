"""False leaks on synthetic non-leaking series, with the exact counts a census would read beside them.

Run: .venv/bin/python bench/leak_false_rate.py [--runs 3000] [--jobs 2]

Each run is one non-leaking memory series (500 MB + the noise model of bench/leak_detection.py,
swing +-20 MB: iid + AR(1) + 3 % spikes) plus, for one kind of object, the count a census reads and
the bytes those objects hold (added to the memory series). The families are the bounded caches and
pools count evidence must not call a leak, and plain churn:

* objects that come and go (a Poisson count), nothing held;
* caches that fill one entry a call and stop at 60 or 128 entries (64 KiB entries: under the noise;
  1 MiB entries: a 60-128 MiB ramp in memory);
* a pool that fills for 70 calls with entries shrinking from 2 MiB to 64 KiB;
* a cache of 5 models of 1,084 graph operations each;
* a loop that keeps its last 8 losses with their autograd graphs (a bounded window of a kind whose
  fill allowance is small, 8 objects);
* containers the census reads as holders (``_evidence.Holder``): a list pool appended every call
  for 70 calls with shrinking entries (the corpus's ``warmup_allocator_pool``), a
  ``deque(maxlen=500)`` window of 64 KiB arrays, and a list the user trims to a window of 60 by
  hand (``del window[0]`` once full): before it is full it looks exactly like a list that collects
  one array a call, so counts call it a leak (the price of the early call on a list; the verdict's
  reason says it rests on the holder).

The loop is simulated by its own pure decisions: ``_plan.calibrate`` and ``_plan.look`` on the
memory series, ``_evidence.count_support`` on the census points, one call per reading (what the
loop does while counts rise, ``_plan.dense_next``), 200 calls of a 0.5 s step in a 2-minute budget
(so the 120-call warm-up gate applies to memory alone). Each run is decided twice from the same
readings: with counts, and with memory alone (counts never support), so the column "added by
counts" is exact. Rates come with a 95 % interval (Wilson; with no false leak, the rule of three
bound 3/n).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

MB = 1024.0 * 1024.0
KB = 1024.0
CALLS = 200
STEP_S = 0.5
SWING = 20 * MB


def noise(rng: np.random.Generator, n: int, swing: float) -> np.ndarray:
    """bench/leak_detection.py's noise model: half iid, half AR(1) phi=0.5, 3 % spikes of S..2S."""
    sd = swing / 2
    half = sd * math.sqrt(0.5)
    e = rng.normal(0, half, n)
    ar = np.zeros(n)
    ar[0] = rng.normal(0, half)
    innov = rng.normal(0, half * math.sqrt(1 - 0.25), n)
    for t in range(1, n):
        ar[t] = 0.5 * ar[t - 1] + innov[t]
    spikes = (rng.random(n) < 0.03) * rng.uniform(1, 2, n) * swing
    return e + ar + spikes


def _pool_bytes(t: np.ndarray) -> np.ndarray:
    sizes = np.where((t >= 1) & (t <= 70), 2 * MB * (1 - np.minimum(t, 70) / 71) + 64 * KB, 0.0)
    return np.cumsum(sizes)


def _list_holder(full_at: int | None) -> object:
    """An append-only list of exact bytes until ``full_at`` calls (then trimmed: no longer append-only)."""

    def holder(i: int) -> object:
        from trainguard.leaks import _evidence

        return _evidence.Holder("list", append_only=full_at is None or i <= full_at, exact_bytes=True)

    return holder


def _deque_holder(i: int) -> object:
    from trainguard.leaks import _evidence

    return _evidence.Holder("deque", bound=500)


#: name -> (kind label, counts(t, rng), bytes held(t) or None when the kind carries no bytes,
#: and optionally what the census knows of the container behind the kind at call i)
FAMILIES: dict = {
    "objects come and go (Poisson 500), nothing held": (
        "python.pkg.Thing",
        lambda t, rng: rng.poisson(500, t.size),
        None,
    ),
    "cache fills to 60 entries of 64 KiB, then hits": (
        "numpy.ndarray",
        lambda t, rng: np.minimum(t, 60),
        lambda t: 64 * KB * np.minimum(t, 60),
    ),
    "cache fills to 128 entries of 64 KiB, then hits": (
        "numpy.ndarray",
        lambda t, rng: np.minimum(t, 128),
        lambda t: 64 * KB * np.minimum(t, 128),
    ),
    "cache fills to 60 entries of 1 MiB, then hits": (
        "numpy.ndarray",
        lambda t, rng: np.minimum(t, 60),
        lambda t: MB * np.minimum(t, 60),
    ),
    "cache fills to 128 entries of 1 MiB, then hits": (
        "numpy.ndarray",
        lambda t, rng: np.minimum(t, 128),
        lambda t: MB * np.minimum(t, 128),
    ),
    "pool fills 70 calls, entries shrinking 2 MiB -> 64 KiB": (
        "numpy.ndarray",
        lambda t, rng: np.minimum(t, 70),
        _pool_bytes,
    ),
    "cache of 5 models (1,084 graph ops each, 10 MiB)": (
        "tensorflow.Operation",
        lambda t, rng: 1084 * np.minimum(t, 5),
        lambda t: 10 * MB * np.minimum(t, 5),
    ),
    "last 8 losses kept with their graphs (200 KiB each)": (
        "torch.Tensor with grad_fn",
        lambda t, rng: np.minimum(t, 8),
        lambda t: 200 * KB * np.minimum(t, 8),
    ),
    "list pool appended 70 calls, entries shrinking 2 MiB -> 64 KiB": (
        "entries of list m.POOL",
        lambda t, rng: np.minimum(t, 70),
        _pool_bytes,
        _list_holder(None),
    ),
    "deque(maxlen=500) window of 64 KiB arrays": (
        "entries of deque m.window",
        lambda t, rng: np.minimum(t, 500),
        lambda t: 64 * KB * np.minimum(t, 500),
        _deque_holder,
    ),
    "list trimmed by hand to the last 60 arrays of 64 KiB (price of the early call)": (
        "entries of list m.window",
        lambda t, rng: np.minimum(t, 60),
        lambda t: 64 * KB * np.minimum(t, 60),
        _list_holder(60),
    ),
}


def make_run(family: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
    """One non-leaking run: memory bytes, counts and bytes of the counted kind, at calls 0..CALLS."""
    kind, count_fn, bytes_fn = FAMILIES[family][:3]
    rng = np.random.default_rng(seed)
    t = np.arange(CALLS + 1, dtype=float)
    held = bytes_fn(t) if bytes_fn is not None else np.zeros_like(t)
    y = 500 * MB + held + noise(rng, t.size, SWING)
    counts = np.asarray(count_fn(t, rng), dtype=np.int64) + 40
    return y, counts, (held if bytes_fn is not None else None), kind


def decide_run(
    y: np.ndarray, counts: np.ndarray, held: np.ndarray | None, kind: str, holder: object = None
) -> tuple[tuple[str, int], tuple[str, int]]:
    """The loop's decisions on one run, with counts and with memory alone: (verdict, calls) each."""
    from trainguard.leaks import _evidence, _plan
    from trainguard.leaks._run import make_config

    config = make_config(max_time=120.0)
    series: list[dict] = []
    points: list[_evidence.CountPoint] = []
    plan = None
    out: dict[bool, tuple[str, int]] = {}
    for i in range(CALLS + 1):
        series.append({"iteration": i, "bytes": float(y[i])})
        nbytes = int(held[i]) if held is not None else 0
        holders = {kind: holder(i)} if holder is not None else {}
        points.append(_evidence.CountPoint(i, {kind: (int(counts[i]), nbytes)}, {}, 0.0, holders))
        if plan is None and len(series) >= 3:
            plan = _plan.calibrate(
                config, series, iterations=i, measure_cost_s=0.001, step_time_s=STEP_S, elapsed_s=i * STEP_S
            )
        final = i == CALLS
        if plan is None or not (final or len(series) in plan.schedule):
            continue
        support = _evidence.count_support(points, series, alpha=plan.alpha_per_look).supports
        args = dict(iterations=i, elapsed_s=i * STEP_S, step_time_s=STEP_S, final=final, key="bytes")
        memory = _plan.look(config, plan, series, count_support=False, **args)
        counted = _plan.look(config, plan, series, count_support=True, **args) if support else memory
        for use, res in ((False, memory), (True, counted)):
            if use not in out and res.stop:
                v = res.decision.verdict
                out[use] = (v.value if v is not None else "inconclusive", i)
        if len(out) == 2:
            break
    if True not in out:  # memory alone stopped and counts never supported: the same verdict
        out[True] = out[False]
    return out[True], out[False]


def _family_chunk(args: tuple[str, int, int]) -> list[tuple[tuple[str, int], tuple[str, int]]]:
    family, start, n = args
    holder = FAMILIES[family][3] if len(FAMILIES[family]) > 3 else None
    return [decide_run(*make_run(family, seed), holder=holder) for seed in range(start, start + n)]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, c - h), min(1.0, c + h)


def measure(runs: int, jobs: int = 1, families: list[str] | None = None) -> list[dict]:
    """Per family: false leaks with counts, with memory alone, and those counts added."""
    names = families or list(FAMILIES)
    chunk = max(1, math.ceil(runs / max(1, jobs * 4)))
    tasks = [(f, s, min(chunk, runs - s)) for f in names for s in range(0, runs, chunk)]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_family_chunk, tasks))
    else:
        results = [_family_chunk(t) for t in tasks]
    by_family: dict[str, list] = {f: [] for f in names}
    for (f, _, _), res in zip(tasks, results, strict=True):
        by_family[f].extend(res)
    rows = []
    for f, res in by_family.items():
        n = len(res)
        with_counts = sum(r[0][0] == "leak" for r in res)
        memory_only = sum(r[1][0] == "leak" for r in res)
        added = sum(r[0][0] == "leak" and r[1][0] != "leak" for r in res)
        verdicts: dict[str, int] = {}
        for r in res:
            verdicts[r[0][0]] = verdicts.get(r[0][0], 0) + 1
        rows.append(
            {
                "family": f,
                "runs": n,
                "leak_with_counts": with_counts,
                "leak_memory_only": memory_only,
                "added_by_counts": added,
                "ci_with_counts": wilson(with_counts, n),
                "verdicts_with_counts": dict(sorted(verdicts.items())),
            }
        )
    return rows


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.2f} %"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3000, help="runs per family")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="families whose name contains one of these words")
    ap.add_argument("--tag", default="", help="suffix of the results file name")
    args = ap.parse_args()
    names = [f for f in FAMILIES if not args.only or any(w in f for w in args.only)]
    t0 = time.perf_counter()
    rows = measure(args.runs, args.jobs, names)
    wall = time.perf_counter() - t0
    print(
        f"## false leaks on non-leaking series ({args.runs} runs per family, swing ±20 MB, {CALLS} calls)\n"
    )
    print(
        "| non-leaking series | runs | `leak` with counts [95 % CI] | memory alone | added by counts | verdicts with counts |"
    )
    print("|---|---:|---|---:|---:|---|")
    for r in rows:
        lo, hi = r["ci_with_counts"]
        bound = (
            f"≤ {300 / r['runs']:.2f} % (rule of three)"
            if r["leak_with_counts"] == 0
            else f"{lo:.2%} .. {hi:.2%}"
        )
        print(
            f"| {r['family']} | {r['runs']:,} | {_pct(r['leak_with_counts'], r['runs'])} [{bound}] | "
            f"{_pct(r['leak_memory_only'], r['runs'])} | {r['added_by_counts']} | {r['verdicts_with_counts']} |"
        )
    n = sum(r["runs"] for r in rows)
    added = sum(r["added_by_counts"] for r in rows)
    print(
        f"\npooled: {sum(r['leak_with_counts'] for r in rows)}/{n} called `leak` with counts, "
        f"{sum(r['leak_memory_only'] for r in rows)}/{n} with memory alone; added by counts: {added}/{n} "
        f"(95 % bound {'≤ %.3f %%' % (300 / n) if added == 0 else '%.3f %%' % (100 * wilson(added, n)[1])}); "
        f"{wall:.0f} s"
    )
    out = Path(__file__).parent / "results" / f"leak_false_rate{'_' + args.tag if args.tag else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "runs": args.runs,
                "rows": rows,
                "wall_s": wall,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
