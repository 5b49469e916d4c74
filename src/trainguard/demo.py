"""The ``trainguard demo``: the seed's repeated Keras ``fit``, naive and then under the Runner.

Both halves run :func:`trainguard.workloads.keras_fit` with its defaults on the TensorFlow backend
(:data:`DEFAULT_DEMO_TRIALS` fits each: about a minute for both halves on 2 cores):

* **naive**: one child process runs every trial in a loop with ``clear_session()`` and
  ``gc.collect()`` after each (what the seed does by hand). It runs in a subprocess so that this
  process never imports TensorFlow and both halves are measured the same way, from outside.
* **runner**: :class:`trainguard.Runner` with one worker and the default policy; the worker imports
  Keras before its first trial (``preload``), as the naive child does before its loop.

Before each TensorFlow load (seconds on 2 cores) ``progress`` hears what is being loaded, so the
demo is never silent for long; every number it shows is measured.

Memory is sampled from outside at 10 Hz (RSS summed over the process tree) for both halves; each
trial's peak is the highest sample inside its time window (naive) or the Runner's own per-trial peak.
Growth per trial is a Theil-Sen slope (median of pairwise slopes) over the trials after the first,
which ignores the one-off warm-up and is not thrown by a single noisy reading.

The naive half and the outside measuring (also the benchmarks' harness) are in
:mod:`trainguard._measured_loop`; this module holds the Runner half and the comparison.

This module imports no framework; ``run_demo`` needs the ``demo`` extra
(``pip install -e '.[demo]'``: tensorflow-cpu and keras).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainguard._measured_loop import DemoHalf, TreeSampler, TrialCallback, run_naive, theil_sen_slope
from trainguard.exceptions import ConfigError, missing

__all__ = [
    "DemoHalf",
    "DemoResult",
    "versions",
    "run_with_runner",
    "run_demo",
    "theil_sen_slope",
    "DEFAULT_DEMO_TRIALS",
]

logger = logging.getLogger(__name__)

#: fits per half: about a minute for both halves on 2 cores, TensorFlow's two loads included (45 s
#: at load 1, 59 s with another process busy on one core; BENCHMARKS.md, "The demo's length"). A fit's
#: second is its graphs' tracing, not its rows (500 rows fit in the same time as 2000), so fewer
#: fits is what makes the demo shorter; 15 growths of +9.8 MiB still show the naive loop's line
DEFAULT_DEMO_TRIALS = 16

#: what a TensorFlow import takes on 2 cores, cold (said before each, so that the wait is not silent)
_LOAD_TIME = "10-20 s"


@dataclass(frozen=True, slots=True)
class DemoResult:
    naive: DemoHalf
    runner: DemoHalf
    params: dict[str, Any]
    versions: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "versions": self.versions,
            "naive": self.naive.to_dict(),
            "runner": self.runner.to_dict(),
        }


def _require_demo_frameworks() -> None:
    import importlib.util

    for package in ("tensorflow", "keras"):
        if importlib.util.find_spec(package) is None:
            raise missing(package, "trainguard demo", extra="demo")


def run_with_runner(
    trials: int,
    params: dict[str, Any] | None = None,
    *,
    store: str,
    workers: int = 1,
    policy: Any = None,
    name: str | None = None,
    interval_s: float = 0.1,
    on_trial: TrialCallback | None = None,
) -> DemoHalf:
    """Run the same fits under :class:`trainguard.Runner`; sample its workers' trees from outside.

    ``on_trial`` is called as each trial finishes."""
    import psutil

    from trainguard.process import tree_memory
    from trainguard.runner import Runner
    from trainguard.store import Store
    from trainguard.workloads import keras_fit

    params = dict(params or {})
    name = name or f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    me = os.getpid()

    def read() -> int | None:
        try:
            return tree_memory(me).children_rss_bytes or None
        except psutil.Error:
            return None

    t0 = time.time()
    with TreeSampler(read, interval_s=interval_s) as sampler:
        # the worker imports Keras before its first trial, as the naive child does: trial 1 is a fit
        with Runner(
            workers=workers, policy=policy, store=store, keras_backend="tensorflow", preload=("keras",)
        ) as runner:
            results = []
            for result in runner.imap(keras_fit, [dict(params) for _ in range(trials)], name=name):
                results.append(result)
                if on_trial is not None:
                    on_trial(result.index, result.duration_s or 0.0, result.peak_rss_bytes)
            results.sort(key=lambda r: r.index)
    wall_s = time.time() - t0
    with Store(store, readonly=True) as reader:
        run = reader.get_run(name)
        worker_rows = reader.workers(run.run_id) if run else []
    peaks = tuple(r.peak_rss_bytes for r in results)
    return DemoHalf(
        mode=f"runner ({workers} worker{'s' if workers != 1 else ''})",
        trials=trials,
        wall_s=wall_s,
        peak_rss_bytes=max([sampler.peak_rss_bytes, *(p for p in peaks if p is not None)]),
        trial_peak_rss_bytes=peaks,
        growth_bytes_per_trial=theil_sen_slope(peaks[1:]),
        values=tuple(r.value for r in results),
        failed=sum(r.status != "ok" for r in results),
        recycles=sum(w.reason == "recycled" for w in worker_rows),
        workers_started=len(worker_rows),
        series=tuple((t - t0, v) for t, v in sampler.series),
        run_name=name,
        store=str(store),
    )


def versions() -> dict[str, str]:
    """Versions of what the demo ran on (read from package metadata: nothing is imported)."""
    import platform
    from importlib import metadata

    from trainguard import __version__

    out = {"trainguard": __version__, "python": platform.python_version(), "platform": platform.platform()}
    for package in ("tensorflow-cpu", "tensorflow", "keras"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    out["cpus"] = str(os.cpu_count())
    return out


def run_demo(
    trials: int = DEFAULT_DEMO_TRIALS,
    *,
    store: str,
    params: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> DemoResult:
    """Run both halves and return what they measured.

    Args:
        trials: fits per half (>= 2).
        store: the Runner's store file.
        params: :func:`~trainguard.workloads.keras_fit` params (default: its defaults).
        progress: called with a line of text before each slow step (a framework's load, a half)
            and as each trial finishes.

    Raises:
        ConfigError: ``trials`` < 2, or ``store`` is in a folder that does not exist.
        StoreError: ``store`` cannot be written or is not a trainguard store.
        MissingDependencyError: TensorFlow or Keras is not installed.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise ConfigError(f"trials must be an int >= 2 (a growth per trial needs two), not {trials!r}")
    _require_demo_frameworks()
    from trainguard.store import Store

    Store(store).close()  # a bad --store fails now, not after the naive half's work
    say = progress or (lambda _line: None)
    from trainguard.units import format_bytes
    from trainguard.workloads import DEMO_PARAMS

    fit_params = dict(params or {})

    def trial_progress(half: str) -> TrialCallback:
        def on_trial(index: int, duration_s: float, rss_bytes: int | None) -> None:
            say(f"  {half} trial {index + 1}/{trials}: {duration_s:.1f} s, RSS {format_bytes(rss_bytes)}")

        return on_trial

    say(f"1/2 naive loop: {trials} x keras fit in one process, clear_session() + gc.collect() after each")
    say(f"  loading TensorFlow in that process ({_LOAD_TIME} the first time)...")
    naive = run_naive(
        trials,
        fit_params,
        on_trial=trial_progress("naive"),
        on_ready=lambda import_s: say(f"  TensorFlow loaded in {import_s:.1f} s; fitting..."),
    )
    say(f"2/2 trainguard Runner: the same {trials} fits, 1 worker, default policy")
    say(f"  starting the worker; it loads TensorFlow before its first fit ({_LOAD_TIME} the first time)...")
    runner = run_with_runner(trials, fit_params, store=store, on_trial=trial_progress("Runner"))
    return DemoResult(naive=naive, runner=runner, params={**DEMO_PARAMS, **fit_params}, versions=versions())
