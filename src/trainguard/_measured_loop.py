"""Trials in a loop, measured from outside: the naive half of ``trainguard demo`` and the benchmarks' harness.

A measured child is a process that runs trials one after another and prints one marked JSON line
per trial (:func:`trial_line`); :func:`run_measured_child` starts it, samples its process tree's
RSS from outside at 10 Hz (:class:`TreeSampler`) and returns a :class:`DemoHalf` whose per-trial
peaks are the highest samples inside each trial's window. :func:`run_naive` is the demo's naive
half: every trial in one child with ``clear_session()`` and ``gc.collect()`` after each (what the
seed does by hand). The scripts under ``bench/`` run their own children (an Optuna study, a Ray
or Torch loop) through the same functions, so both are measured the same way.

This module imports no framework; the naive child imports Keras in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from trainguard.exceptions import TrainguardError

__all__ = [
    "DemoHalf",
    "TreeSampler",
    "ReadyCallback",
    "TrialCallback",
    "run_naive",
    "run_measured_child",
    "theil_sen_slope",
    "trial_line",
]

_MARK = "TRAINGUARD-DEMO "


@dataclass(frozen=True, slots=True)
class DemoHalf:
    """What one way of running the trials measured.

    ``trial_peak_rss_bytes[i]`` is trial i's peak RSS; ``series`` is the outside sampler's
    ``(seconds since start, tree RSS bytes)``; ``recycles`` counts workers the Runner replaced.
    """

    mode: str
    trials: int
    wall_s: float
    peak_rss_bytes: int
    trial_peak_rss_bytes: tuple[int | None, ...]
    growth_bytes_per_trial: float | None
    values: tuple[Any, ...]
    failed: int = 0
    recycles: int = 0
    workers_started: int = 0
    series: tuple[tuple[float, int], ...] = field(default=(), repr=False)
    run_name: str | None = None
    store: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field but the series, tuples as lists."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "series"}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def theil_sen_slope(values: Sequence[float | None]) -> float | None:
    """Median of the pairwise slopes of ``values`` against their index (None entries skipped).

    The estimator of :func:`trainguard.leaks.stats.theil_sen`; None with fewer than two values.
    """
    from trainguard.leaks.stats import theil_sen

    points = [(i, float(v)) for i, v in enumerate(values) if v is not None]
    if len(points) < 2:
        return None
    return theil_sen([v for _, v in points], [i for i, _ in points])


class TreeSampler:
    """Sample the RSS of a process tree from outside, on a thread, until stopped.

    A :class:`trainguard.sampling.Sampler` with one probe, read back as ``(unix time, bytes)``
    pairs so that a trial's peak can be taken between its start and end times.

    Args:
        read_rss: returns the bytes to record, or None when there is nothing to read yet.
        interval_s: seconds between samples (0.1 = 10 Hz).
    """

    def __init__(self, read_rss: Callable[[], int | None], *, interval_s: float = 0.1) -> None:
        from trainguard.sampling import Sampler

        self._sampler = Sampler({"rss_bytes": read_rss}, interval_s=interval_s)

    def __enter__(self) -> TreeSampler:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sampler.close()

    @property
    def series(self) -> list[tuple[float, int]]:
        timeline = self._sampler.timeline
        t0 = timeline.started_unix_s
        return [
            (t0 + t, int(v))
            for t, v in zip(timeline.times_s, timeline.series("rss_bytes"), strict=True)
            if v is not None
        ]

    @property
    def peak_rss_bytes(self) -> int:
        return int(self._sampler.timeline.peak("rss_bytes") or 0)

    def peak_between(self, start: float, end: float) -> int | None:
        inside = [v for t, v in self.series if start <= t <= end]
        return max(inside) if inside else None


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["KERAS_BACKEND"] = "tensorflow"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _naive_child() -> None:
    """Entry point of the naive half's child process: all trials in one loop, one JSON line each."""
    import psutil

    spec = json.loads(sys.argv[1])
    params = spec["params"]
    proc = psutil.Process()
    started = time.time()
    import keras  # noqa: F401 - imported here so that its start-up is not counted in the first trial

    from trainguard.workloads import keras_fit

    print(_MARK + json.dumps({"event": "ready", "import_s": time.time() - started}), flush=True)
    for index in range(spec["trials"]):
        start = time.time()
        value = keras_fit(params)  # does del model; clear_session(); gc.collect(), as the seed does
        end = time.time()
        print(trial_line(index, start, end, proc.memory_info().rss, value), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip TensorFlow's slow interpreter teardown


#: ``on_trial(index, duration_s, rss_bytes)``: called as each trial of a half finishes.
TrialCallback = Callable[[int, float, "int | None"], None]

#: ``on_ready(import_s)``: called when the child has imported its framework, before its first trial.
ReadyCallback = Callable[[float], None]


def run_naive(
    trials: int,
    params: dict[str, Any] | None = None,
    *,
    interval_s: float = 0.1,
    on_trial: TrialCallback | None = None,
    on_ready: ReadyCallback | None = None,
) -> DemoHalf:
    """Run ``trials`` fits in one child process, as a user would by hand; measure it from outside.

    ``on_ready`` hears how long the child took to import Keras and TensorFlow (seconds of silence
    otherwise), ``on_trial`` each trial as it finishes.

    Raises:
        TrainguardError: the child failed (its last lines of stderr are in the message).
    """
    spec = json.dumps({"trials": trials, "params": dict(params or {})})
    code = "from trainguard._measured_loop import _naive_child; _naive_child()"
    return run_measured_child(
        [sys.executable, "-c", code, spec],
        trials,
        mode="naive",
        interval_s=interval_s,
        on_trial=on_trial,
        on_ready=on_ready,
    )


def run_measured_child(
    command: Sequence[str],
    trials: int,
    *,
    mode: str,
    interval_s: float = 0.1,
    env: dict[str, str] | None = None,
    on_trial: TrialCallback | None = None,
    on_ready: ReadyCallback | None = None,
) -> DemoHalf:
    """Run a child that prints one marked JSON line per trial and sample its process tree from outside.

    ``on_trial`` is called as each trial's line arrives (progress for a half that takes minutes),
    ``on_ready`` with ``import_s`` when a ``{"event": "ready", "import_s"}`` line arrives.

    Each line is ``TRAINGUARD-DEMO {"event": "trial", "index", "start", "end", "rss_after_bytes", "value"}``
    (see :func:`_naive_child`); a trial's peak is the highest outside sample within its window.

    Raises:
        TrainguardError: the child exited non-zero or reported fewer than ``trials`` trials.
    """
    import psutil

    from trainguard.process import tree_memory

    t0 = time.time()
    proc = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or _child_env(),
    )
    stderr_lines: list[str] = []
    out, err = proc.stdout, proc.stderr
    assert out is not None and err is not None  # both are pipes
    drain = threading.Thread(target=lambda: stderr_lines.extend(err), daemon=True)
    drain.start()

    def read() -> int | None:
        try:
            return tree_memory(proc.pid).rss_bytes
        except psutil.Error:
            return None

    rows: list[dict[str, Any]] = []
    with TreeSampler(read, interval_s=interval_s) as sampler:
        for line in out:
            if line.startswith(_MARK):
                event = json.loads(line[len(_MARK) :])
                if event["event"] == "trial":
                    rows.append(event)
                    if on_trial is not None:
                        on_trial(event["index"], event["end"] - event["start"], event["rss_after_bytes"])
                elif event["event"] == "ready" and on_ready is not None:
                    on_ready(float(event.get("import_s", 0.0)))
        exit_code = proc.wait()
    wall_s = time.time() - t0
    drain.join(timeout=5)
    if exit_code != 0 or len(rows) != trials:
        from trainguard.frameworks import is_startup_noise, min_log_level

        level = min_log_level(env or _child_env())  # TF's start-up lines must not hide the error
        kept = [line for line in stderr_lines if line.strip() and not is_startup_noise(line, level)]
        tail = " | ".join(line.strip() for line in kept[-3:])
        raise TrainguardError(
            f"the {mode} loop failed (exit code {exit_code}, {len(rows)} of {trials} trials): {tail}"
        )
    peaks = tuple(
        max(filter(None, [sampler.peak_between(r["start"], r["end"]), r["rss_after_bytes"]])) for r in rows
    )
    return DemoHalf(
        mode=mode,
        trials=trials,
        wall_s=wall_s,
        peak_rss_bytes=max(sampler.peak_rss_bytes, *peaks),
        trial_peak_rss_bytes=peaks,
        growth_bytes_per_trial=theil_sen_slope(peaks[1:]),
        values=tuple(r["value"] for r in rows),
        series=tuple((t - t0, v) for t, v in sampler.series),
    )


def trial_line(index: int, start: float, end: float, rss_after_bytes: int, value: Any) -> str:
    """The line a measured child prints after each trial (see :func:`run_measured_child`)."""
    row = {
        "event": "trial",
        "index": index,
        "start": start,
        "end": end,
        "rss_after_bytes": rss_after_bytes,
        "value": value,
    }
    return _MARK + json.dumps(row)
