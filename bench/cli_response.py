"""How soon trainguard answers where it promises to answer at once, or to stop at a bound.

The tests assert what happens (the one-line refusal, the timeout status, no process started); how
long it takes is measured here, where a loaded machine makes a slow row and not a failed test.
Each row runs ``--repeats`` times (fresh processes for the CLI rows) and reports the median and the
worst wall time beside the target:

- ``doctor --json``: the environment report (target: under 2 s on an idle machine);
- ``run`` with a grid of 10^12 trials: refused after counting it, before any store or worker;
- ``demo --trials 1``: refused before any fit;
- a trial that hangs, ``Policy(timeout="1.5s")``: the result arrives soon after the timeout;
- ``leakcheck(max_time="3s")`` of a step whose census is slower than the step: the census falls
  back and the check ends near its budget;
- a Ray address where a socket accepts and never answers (``connect_timeout=2``): refused near 2 s
  (skipped without Ray);
- ``export --to mlflow`` at a refused port: one line, at once (skipped without MLflow).

    .venv/bin/python bench/cli_response.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIALS = ROOT / "tests" / "integration" / "runner_trials.py"
sys.path.insert(0, str(ROOT / "tests" / "integration"))


def _cli(*args: str) -> Callable[[], float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}

    def once() -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainguard", *args], capture_output=True, env=env, timeout=600)
        return time.perf_counter() - start

    return once


def _huge_grid(folder: Path) -> Callable[[], float]:
    grid = folder / "huge.yaml"
    grid.write_text("".join(f"k{i}: [{', '.join(str(v) for v in range(10))}]\n" for i in range(12)))
    return _cli("run", f"{TRIALS}:echo", "--params", str(grid), "--store", str(folder / "never.db"))


def _hung_trial() -> float:
    import trainguard

    start = time.perf_counter()
    with trainguard.Runner(workers=1, store=None, policy=trainguard.Policy(timeout="1.5s")) as runner:
        (result,) = runner.map(f"{TRIALS}:fault", [{"kind": "hang"}])
    assert result.error.status == "timeout", result.error
    return time.perf_counter() - start


_HEAP: list[object] = []


def _heavy_heap_step() -> None:
    if not _HEAP:
        _HEAP.extend([i] for i in range(300_000))


def _census_fallback() -> float:
    import trainguard

    report = trainguard.leakcheck(_heavy_heap_step, max_time="3s", min_iterations=10**9)
    return report.elapsed_s


def _ray_silent_address() -> float:
    from trainguard.exceptions import ConfigError
    from trainguard.runner.backends.ray import RayClusterBackend

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        backend = RayClusterBackend(address=f"127.0.0.1:{server.getsockname()[1]}", connect_timeout=2.0)
        start = time.perf_counter()
        try:
            backend._tcp_check()
            backend._answers_as_a_head()
        except ConfigError:
            pass
        return time.perf_counter() - start


def _mlflow_refused_port(folder: Path) -> Callable[[], float]:
    from trainguard.store import Store

    db = folder / "runs.db"
    with Store(db) as store:
        run = store.begin_run("sweep", "m:f", [{"a": 1}], {})
        store.finish_run(run.run_id, "completed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed on return: nothing listens there
    return _cli(
        "export", "sweep", "--store", str(db), "--to", "mlflow", "--tracking-uri", f"http://127.0.0.1:{port}"
    )


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tg-cli-response-"))
    rows: list[tuple[str, str, Callable[[], float]]] = [
        ("doctor --json", "< 2 s idle", _cli("doctor", "--json")),
        ("run, 10^12-trial grid refused", "at once", _huge_grid(folder)),
        ("demo --trials 1 refused", "at once", _cli("demo", "--trials", "1")),
        ("hung trial, timeout 1.5 s", "~1.5 s + worker start", _hung_trial),
        ("leakcheck, slow census, max_time 3 s", "~3 s", _census_fallback),
    ]
    if _has("ray"):
        rows.append(("Ray address that never answers, timeout 2 s", "~2 s", _ray_silent_address))
    if _has("mlflow"):
        rows.append(
            ("export to a refused MLflow port", "at once (250 s before)", _mlflow_refused_port(folder))
        )
    print(
        f"# trainguard response times ({args.repeats} runs each, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})\n"
    )
    print("| what | target | median s | worst s |")
    print("|---|---|---|---|")
    results = []
    for what, target, fn in rows:
        times = [fn() for _ in range(args.repeats)]
        results.append({"what": what, "target": target, "times_s": times})
        print(f"| {what} | {target} | {statistics.median(times):.2f} | {max(times):.2f} |", flush=True)
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
