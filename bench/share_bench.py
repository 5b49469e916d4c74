"""Benchmark: one large float32 array given to 2 workers, shared (``trainguard.share``) against
pickled into the trial function's closure, beside 2 workers that get no data; measured in one run.

    .venv/bin/python bench/share_bench.py            # 1 GiB, about 1-2 minutes, ~6 GB of RAM at the peak
    .venv/bin/python bench/share_bench.py --gib 0.25

Each configuration runs 2 trials in 2 workers; every trial reads the whole array (a float64 sum)
and then holds for a moment, so both workers are alive with the data touched. A thread samples the
PSS of this process and every descendant (``/proc/PID/smaps_rollup``) at 5 Hz; the table gives the
highest sum minus that of the no-data configuration. PSS divides a shared page among the processes
that map it, so the sum counts memory once however many processes share it.

Attach time: for shared data, the worker's own ``np.load(mmap_mode="r")`` of every array
(``SharedData.attach_s``); for the closure, how much later than without data the trial started
(the worker receives and unpickles the array before it can run). "params" is no option: params are
JSON, and a 1 GiB array as JSON is several GB of text. Writes bench/results/share_bench.json.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GiB = 2**30
X: np.ndarray | None = None  # the closure's array (pickled with the function, by value)


def no_data(params, ctx):
    # the same imports as the shared trial (numpy, the context), so the difference is the data
    started = time.time()
    total = float(np.zeros(4).sum())
    Path(params["marker_dir"], str(params["i"])).touch()
    time.sleep(params["hold_s"])
    return {"started": started, "sum": total, "attach_s": None}


def closure_trial(params, ctx):
    started = time.time()
    total = _read_all(X)
    Path(params["marker_dir"], str(params["i"])).touch()
    time.sleep(params["hold_s"])
    return {"started": started, "sum": total}


def shared_trial(params, ctx):
    started = time.time()
    data = ctx.data
    total = _read_all(data["x"])
    Path(params["marker_dir"], str(params["i"])).touch()
    time.sleep(params["hold_s"])
    return {"started": started, "sum": total, "attach_s": data.attach_s}


def _read_all(x: np.ndarray) -> float:
    """Touch every page; in row blocks, so that the float64 sum's buffers stay small."""
    return float(sum(float(x[i : i + 4096].sum(dtype=np.float64)) for i in range(0, len(x), 4096)))


def _tree_pss() -> int:
    from trainguard.process import descendants, smaps_rollup_bytes

    total = 0
    for pid in [os.getpid(), *descendants(os.getpid())]:
        reading = smaps_rollup_bytes(pid)
        if reading is not None:
            total += reading.pss_bytes
    return total


class PeakPss:
    """The highest PSS sum while both workers hold the data they have read (``steady``), and over
    the whole run (``peak``). One reading visits the processes one after another, so while workers
    are still mapping pages the sum is not one instant's and can over-count shared pages; once
    every worker has read everything it is exact."""

    def __init__(self, marker_dir: Path) -> None:
        self.peak = self.steady = 0
        self._markers = marker_dir
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            holding = len(os.listdir(self._markers)) == 2
            reading = _tree_pss()
            self.peak = max(self.peak, reading)
            if holding and len(os.listdir(self._markers)) == 2:
                self.steady = max(self.steady, reading)

    def __enter__(self) -> PeakPss:
        self.peak = _tree_pss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_config(name: str, fn, store: Path, hold_s: float, data=None) -> dict:
    import trainguard

    gc.collect()
    markers = Path(tempfile.mkdtemp(prefix=f"share-bench-{name}-"))
    atexit.register(shutil.rmtree, markers, ignore_errors=True)
    with trainguard.Runner(workers=2, store=store, threads=1) as runner, PeakPss(markers) as pss:
        t0 = time.time()
        params = [{"hold_s": hold_s, "i": i, "marker_dir": str(markers)} for i in range(2)]
        results = runner.map(fn, params, name=name, data=data)
        wall = time.time() - t0
    bad = [r.error for r in results if not r.ok]
    if bad:
        raise SystemExit(f"{name}: {bad}")
    return {
        "name": name,
        "wall_s": wall,
        "steady_pss_bytes": pss.steady,
        "peak_pss_bytes": pss.peak,
        "start_delay_s": [r.value["started"] - t0 for r in results],
        "attach_s": [r.value.get("attach_s") for r in results],
        "sums": [r.value.get("sum") for r in results],
    }


def main() -> None:
    global X
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="array size in GiB (default 1)")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds each trial holds after reading")
    args = parser.parse_args()
    import trainguard

    rows = int(args.gib * GiB) // (4 * 1024)
    tmp = Path(tempfile.mkdtemp(prefix="share-bench-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    out: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "gib": args.gib}

    base = run_config("no_data", no_data, tmp / "a.db", args.hold)

    x = np.random.default_rng(0).random((rows, 1024), dtype=np.float32)
    nbytes = x.nbytes
    start = time.perf_counter()
    data = trainguard.share({"x": x})
    share_s = time.perf_counter() - start
    del x  # the supervisor keeps only the handle, as a training script that loads then shares does
    gc.collect()
    shared = run_config("shared", shared_trial, tmp / "b.db", args.hold, data=data)
    location = data.location
    data.close()

    X = np.random.default_rng(0).random((rows, 1024), dtype=np.float32)
    closure = run_config("closure", closure_trial, tmp / "c.db", args.hold)
    X = None

    out.update(
        {
            "array_bytes": nbytes,
            "share_s": share_s,
            "location": location,
            "configs": [base, shared, closure],
            "versions": {
                "python": platform.python_version(),
                "numpy": np.__version__,
                "trainguard": trainguard.__version__,
            },
        }
    )
    base_pss = base["steady_pss_bytes"]
    base_delay = max(base["start_delay_s"])
    print(f"array {nbytes / GiB:.2f} GiB float32; shared in {share_s:.2f} s to {location}")
    print(
        f"{'config':10} {'PSS - no data':>15} {'/ array':>8} {'attach per worker':>20} {'wall s':>7}"
        f" {'transient peak - no data':>26}"
    )
    for cfg in (base, shared, closure):
        rise = cfg["steady_pss_bytes"] - base_pss
        transient = cfg["peak_pss_bytes"] - base["peak_pss_bytes"]
        cfg["transient_rise_bytes"] = transient
        if cfg["name"] == "shared":
            attach = f"{max(a for a in cfg['attach_s']) * 1000:.1f} ms"
        elif cfg["name"] == "closure":
            attach = f"{(max(cfg['start_delay_s']) - base_delay):.2f} s later"
        else:
            attach = "-"
        cfg["pss_rise_bytes"] = rise
        print(
            f"{cfg['name']:10} {rise / GiB:>11.2f} GiB {rise / nbytes:>8.2f} {attach:>20} {cfg['wall_s']:>7.1f}"
            f" {transient / GiB:>22.2f} GiB"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "share_bench.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main())
