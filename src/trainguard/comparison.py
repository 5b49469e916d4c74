"""Compare configurations by measurement: the same trial under each Keras backend, allocator and
thread count, each configuration in its own fresh worker, side by side in one call.

The seed's cures for the repeated-fit leak ("switch the Keras backend", "try another allocator")
are claims; :func:`compare` measures them. Per configuration it runs ``trials`` trials one after the
other in one fresh worker (no recycling, and TensorFlow's custom-gradient graphs not released, so
the trial's own growth shows as it would in a plain loop) and reports the growth per trial with its
95 % interval (:func:`trainguard.leaks.stats.robust_slope` over the worker's RSS after each trial,
read inside the worker after ``gc.collect()``; the first trial, which holds the framework's import
and warm-up, is left out when there are four or more), the peak RSS of the worker tree, the median
seconds per trial and the failures. Beside RSS it gives the C allocator's bytes in use, read in
the worker after the same ``gc.collect()`` (:mod:`trainguard.probes.allocator`: glibc's
``mallinfo2``, jemalloc's or tcmalloc's own count), at the end of the loop: RSS that grows while
they do not is memory the allocator keeps, not memory the trial holds. A configuration whose
backend package or allocator library is not installed is skipped with the reason.

JSON shape (``Comparison.to_dict()``, ``trainguard compare --json``)::

    {
      "fn": "train.py:train", "params": {...}, "trials": 12, "elapsed_s": 95.1,
      "baseline": "tensorflow / glibc / 1 thread",          # the first configuration measured
      "recommendation": "one paragraph in words",
      "results": [
        {
          "label": "tensorflow / glibc / 1 thread",
          "configuration": {"keras_backend": "tensorflow", "allocator": "glibc", "threads": 1},
          "skipped": null,                                   # or the reason, with nothing measured
          "trials": 12, "failures": 0, "failure_statuses": [],
          "growth_bytes_per_trial": 10200000.0,              # Theil-Sen slope, null when skipped
          "growth_ci_low_bytes_per_trial": 9600000.0,        # 95 % interval
          "growth_ci_high_bytes_per_trial": 10800000.0,
          "growing": true,                                   # the interval is above 0
          "peak_rss_bytes": 812000000, "seconds_per_trial": 1.21, "wall_s": 17.3,
          "rss_after_bytes": [...],                          # one reading per trial that finished
          "bytes_in_use_bytes": 41000000,                    # the C allocator's, after the last trial
          "bytes_in_use_after_bytes": [...],                 # after each trial (null where not counted)
          "bytes_in_use_allocator": "glibc",                 # whose count it is (null: none)
          "vs_baseline": {"time_ratio": 1.0, "growth_change": "baseline"},
          "words": "grows +9.7 MiB/trial [+9.2, +10.3]"
        }
      ]
    }
"""

from __future__ import annotations

import base64
import gc
import importlib.util
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["compare", "Comparison", "ConfigurationResult", "ALLOCATORS"]

#: Allocators compare knows: glibc is the default (nothing preloaded).
ALLOCATORS = ("glibc", "jemalloc", "tcmalloc")


@dataclass(frozen=True, slots=True)
class ConfigurationResult:
    """One configuration's measurements (see the module docstring for each field)."""

    label: str
    configuration: dict[str, Any]
    skipped: str | None = None
    trials: int = 0
    failures: int = 0
    failure_statuses: list[str] = field(default_factory=list)
    growth_bytes_per_trial: float | None = None
    growth_ci_low_bytes_per_trial: float | None = None
    growth_ci_high_bytes_per_trial: float | None = None
    growing: bool | None = None
    peak_rss_bytes: int | None = None
    seconds_per_trial: float | None = None
    wall_s: float | None = None
    rss_after_bytes: list[int] = field(default_factory=list)
    bytes_in_use_bytes: int | None = None
    bytes_in_use_after_bytes: list[int | None] = field(default_factory=list)
    bytes_in_use_allocator: str | None = None
    vs_baseline: dict[str, Any] = field(default_factory=dict)
    words: str = ""


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every configuration's result, the baseline's label and a recommendation in words."""

    fn: str
    params: dict[str, Any]
    trials: int
    results: tuple[ConfigurationResult, ...]
    baseline: str | None
    recommendation: str
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        """The comparison as the JSON shape this module's docstring documents (``compare --json``).

        Returns:
            The configurations' measurements and the recommendation as plain JSON values.
        """
        out = asdict(self)
        out["results"] = [asdict(r) for r in self.results]
        return out

    def table(self) -> str:
        """A plain-text table, one row per configuration, then the recommendation.

        Returns:
            The table and the recommendation, as text.
        """
        from trainguard.units import format_bytes

        rows = [
            (
                "configuration",
                "growth/trial [95 % interval]",
                "peak RSS",
                "RSS at end",
                "in use at end",
                "s/trial",
                "failed",
                "note",
            )
        ]
        for r in self.results:
            if r.skipped:
                rows.append((r.label, "-", "-", "-", "-", "-", "-", f"skipped: {r.skipped}"))
                continue
            growth = (
                f"{format_bytes(r.growth_bytes_per_trial, signed=True)} "
                f"[{format_bytes(r.growth_ci_low_bytes_per_trial, signed=True)}, "
                f"{format_bytes(r.growth_ci_high_bytes_per_trial, signed=True)}]"
                if r.growth_bytes_per_trial is not None
                else "-"
            )
            ratio = r.vs_baseline.get("time_ratio")
            note = "baseline" if r.label == self.baseline else (f"{ratio:.2f}x time" if ratio else "")
            rows.append(
                (
                    r.label,
                    growth,
                    format_bytes(r.peak_rss_bytes),
                    format_bytes(r.rss_after_bytes[-1]) if r.rss_after_bytes else "-",
                    "-" if r.bytes_in_use_bytes is None else format_bytes(r.bytes_in_use_bytes),
                    "-" if r.seconds_per_trial is None else f"{r.seconds_per_trial:.2f}",
                    f"{r.failures}/{r.trials}",
                    note,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines) + "\n\n" + self.recommendation


def _label(backend: str | None, allocator: str, threads: int | None) -> str:
    parts = [backend or "default backend", allocator]
    parts.append("default threads" if threads is None else f"{threads} thread{'s' if threads != 1 else ''}")
    return " / ".join(parts)


def _split(value: str | Sequence[Any] | None) -> list[Any]:
    if value is None:
        return [None]
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value)


# -- the trial that runs in each worker ---------------------------------------------------------

_LOADED: dict[str, Callable[..., Any]] = {}


def _rss_bytes() -> int:
    from trainguard.process import statm_rss_bytes

    return statm_rss_bytes(os.getpid()) or 0


def measured_trial(params: dict[str, Any]) -> dict[str, Any]:
    """Worker side: run the user's trial once, then read this process's RSS and its C allocator's
    bytes in use (None where it has no such count) after ``gc.collect()``."""
    from trainguard.runner import load_fn as load

    kind, payload = params["fn_kind"], params["fn_payload"]
    key = f"{kind}:{payload}"
    fn = _LOADED.get(key)
    if fn is None:
        data: str | bytes = base64.b64decode(payload) if kind == "pickle" else payload
        fn = _LOADED[key] = load(kind, data)
    start = time.perf_counter()
    fn(dict(params["params"]))
    seconds = time.perf_counter() - start
    gc.collect()
    in_use, allocator = _bytes_in_use()
    return {
        "rss_after_bytes": _rss_bytes(),
        "seconds": seconds,
        "bytes_in_use": in_use,
        "allocator": allocator,
    }


#: this worker's allocator probe, bound at its first trial
_PROBE: list[Any] = []


def _bytes_in_use() -> tuple[int | None, str | None]:
    from trainguard.probes.allocator import AllocatorProbe

    if not _PROBE:
        _PROBE.append(AllocatorProbe())
    probe = _PROBE[0]
    value = probe.read() if probe.available else None
    return value, (probe.name if value is not None else None)


# -- the comparison -----------------------------------------------------------------------------


def compare(
    fn: Callable[[dict[str, Any]], Any] | str,
    params: Mapping[str, Any] | None = None,
    *,
    keras_backend: str | Sequence[str | None] | None = None,
    allocator: str | Sequence[str] = ("glibc",),
    threads: int | str | Sequence[int | None] | None = None,
    trials: int = 12,
    memory_limit: str | int | None = None,
    timeout: str | float | None = None,
    tolerance: str | int = "256KiB",
    store: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    """Run ``fn(params)`` ``trials`` times under every combination of the given Keras backends,
    allocators and thread counts, each combination in its own fresh worker, and compare them.

    Args:
        fn: the trial (a callable, ``"pkg.module:fn"`` or ``"file.py:fn"``).
        params: the one params dict every trial gets.
        keras_backend: backends to try (``"tensorflow,torch,jax"`` or a list); None: the environment's.
        allocator: any of ``glibc`` (no preload), ``jemalloc``, ``tcmalloc``, or a ``.so`` path.
        threads: thread counts per worker to try (``"1,2"`` or a list); None: the Runner's default.
        trials: trials per configuration (>= 3: the interval needs them).
        memory_limit / timeout: hard limits per trial, as in :class:`trainguard.Policy`.
        tolerance: growth per trial that counts as none, and the smallest difference between two
            configurations' growth that counts as a change (also at least 5 % of the baseline's).
        store: a store path to keep every configuration's run in (named ``compare-...``), or None.
        progress: called with one line as each configuration starts and ends.

    Returns:
        A :class:`Comparison`; ``.table()`` for people, ``.to_dict()`` for JSON (shape above).

    Raises:
        ConfigError: an unknown backend or allocator, a bad thread count or trial count, a bad fn or
            params. Configurations that are valid but not installed are skipped, not errors.
    """
    from trainguard.runner import Policy, check_params
    from trainguard.runner import prepare_fn as prepare
    from trainguard.units import parse_duration, parse_size

    tolerance_bytes = parse_size(tolerance, name="tolerance")
    params = dict(params or {})
    check_params([params])
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 3:
        raise ConfigError(
            f"trials={trials!r} must be a whole number >= 3 (the growth interval needs 3), such as 12"
        )
    backends, allocators, thread_counts = _configurations(keras_backend, allocator, threads)
    spec = prepare(fn)
    payload = base64.b64encode(spec.payload).decode() if isinstance(spec.payload, bytes) else spec.payload
    trial_params = {"fn_kind": spec.kind, "fn_payload": payload, "params": params}
    policy = Policy(
        peak_ratio=None,
        predictive=False,
        memory_limit=parse_size(memory_limit, name="memory_limit", allow_none=True),
        timeout=parse_duration(timeout, name="timeout", allow_none=True),
    )
    started = time.monotonic()
    results: list[ConfigurationResult] = []
    for backend, alloc, count in itertools.product(backends, allocators, thread_counts):
        label = _label(backend, alloc, count)
        config = {"keras_backend": backend, "allocator": alloc, "threads": count}
        reason, alloc_path = _unavailable(backend, alloc)
        if reason is not None:
            results.append(ConfigurationResult(label, config, skipped=reason))
            if progress:
                progress(f"{label}: skipped: {reason}")
            continue
        if progress:
            progress(f"{label}: running {trials} trials in a fresh worker")
        t0 = time.monotonic()
        runner_options = {"keras_backend": backend, "allocator": alloc_path, "threads": count}
        name = None if store is None else _run_name(spec.ref, params, label)
        jobs = [dict(trial_params, trial=i) for i in range(trials)]
        done = _measure(policy, store, runner_options, jobs, name)
        wall = time.monotonic() - t0
        results.append(_summarise(label, config, done, wall, tolerance_bytes))
        if progress:
            progress(f"{label}: {results[-1].words} ({wall:.1f} s)")
    measured = [r for r in results if r.skipped is None]
    baseline = measured[0] if measured else None
    results = [_against(r, baseline, tolerance_bytes) for r in results]
    return Comparison(
        fn=spec.ref,
        params=params,
        trials=trials,
        results=tuple(results),
        baseline=baseline.label if baseline else None,
        recommendation=_recommend(results, baseline),
        elapsed_s=time.monotonic() - started,
    )


def _configurations(
    keras_backend: Any, allocator: Any, threads: Any
) -> tuple[list[str | None], list[str], list[int | None]]:
    """The backends, allocators and thread counts to try, each checked (one-line errors)."""
    from trainguard.runner import KERAS_BACKENDS

    backends = _split(keras_backend)
    for b in backends:
        if b is not None and b not in KERAS_BACKENDS:
            raise ConfigError(
                f"unknown Keras backend {b!r}: use any of {', '.join(KERAS_BACKENDS)}, comma-separated"
            )
    allocators = _split(allocator)
    if not allocators:
        raise ConfigError("allocator is empty: give any of glibc, jemalloc, tcmalloc")
    for a in allocators:
        if a not in ALLOCATORS and not (isinstance(a, str) and (".so" in a or os.sep in a)):
            raise ConfigError(
                f"unknown allocator {a!r}: use any of {', '.join(ALLOCATORS)} or a .so path, comma-separated"
            )
    thread_counts: list[int | None] = []
    for t in _split([threads] if isinstance(threads, int) else threads):
        try:
            count = None if t is None else int(t)
        except (TypeError, ValueError):
            count = 0
        if count is not None and (count < 1 or isinstance(t, bool)):
            raise ConfigError(f"threads {t!r} must be whole numbers >= 1, such as 1,2")
        thread_counts.append(count)
    for option, values in (
        ("keras_backend", backends),
        ("allocator", allocators),
        ("threads", thread_counts),
    ):
        if len(set(values)) != len(values):
            raise ConfigError(f"{option} lists a value twice: {values}")
    return backends, allocators, thread_counts


def _unavailable(backend: str | None, alloc: str) -> tuple[str | None, str | None]:
    """Why a configuration cannot run here (None when it can), and the allocator's library path."""
    from trainguard.runner import KERAS_BACKENDS, find_allocator

    if backend is not None:
        if importlib.util.find_spec("keras") is None:
            return "keras is not installed (pip install keras)", None
        if importlib.util.find_spec(KERAS_BACKENDS[backend]) is None:
            return (
                f"the {backend} backend needs the package {KERAS_BACKENDS[backend]!r}, which is not installed",
                None,
            )
    if alloc == "glibc":
        return None, None
    try:
        return None, find_allocator(alloc)
    except ConfigError as err:
        return str(err), None


def _run_name(ref: str, params: dict[str, Any], label: str) -> str:
    from trainguard.runner import default_run_name

    return f"compare-{default_run_name(ref, [params]).rpartition('-')[2]}-{label.replace(' / ', '-').replace(' ', '_')}"


def _measure(
    policy: Any, store: Any, runner_options: dict[str, Any], jobs: list[dict[str, Any]], name: str | None
) -> Sequence[Any]:
    """One configuration's trials, in one fresh worker."""
    from trainguard.runner import Runner

    # measure the trial's own growth, as in the user's loop: TensorFlow's custom-gradient graphs
    # are kept, not released as trainguard's workers do by default
    with Runner(workers=1, policy=policy, store=store, tf_custom_gradients=False, **runner_options) as runner:
        return runner.map(measured_trial, jobs, name=name)


def _summarise(
    label: str, config: dict[str, Any], done: Sequence[Any], wall: float, tolerance_bytes: int
) -> ConfigurationResult:
    from trainguard.leaks.stats import robust_slope
    from trainguard.units import format_bytes

    ok = [r for r in done if r.ok]
    failed = [r for r in done if not r.ok]
    rss = [int(r.value["rss_after_bytes"]) for r in ok]
    in_use = [r.value.get("bytes_in_use") for r in ok]
    counted = [r.value.get("allocator") for r in ok if r.value.get("bytes_in_use") is not None]
    series = rss[1:] if len(rss) >= 4 else rss  # the first trial holds the import and warm-up
    slope = low = high = None
    growing = None
    if len(series) >= 3:
        est = robust_slope(series, resolution=4096)
        slope, low, high = float(est.slope), float(est.ci_low), float(est.ci_high)
        growing = bool(low > 0 and slope > tolerance_bytes)
    seconds = statistics.median([float(r.value["seconds"]) for r in ok]) if ok else None
    peaks = [r.peak_rss_bytes for r in done if r.peak_rss_bytes]
    if slope is None:
        words = f"too few finished trials for a growth figure ({len(ok)} of {len(done)})"
    else:
        verb = "grows" if growing else "no growth:"
        words = (
            f"{verb} {format_bytes(slope, signed=True)}/trial "
            f"[{format_bytes(low, signed=True)}, {format_bytes(high, signed=True)}]"
        )
    if failed:
        words += f"; {len(failed)} failed ({', '.join(sorted({r.error.status if r.error else 'failed' for r in failed}))})"
    return ConfigurationResult(
        label,
        config,
        trials=len(done),
        failures=len(failed),
        failure_statuses=[r.error.status if r.error else "failed" for r in failed],
        growth_bytes_per_trial=slope,
        growth_ci_low_bytes_per_trial=low,
        growth_ci_high_bytes_per_trial=high,
        growing=growing,
        peak_rss_bytes=max(peaks) if peaks else None,
        seconds_per_trial=seconds,
        wall_s=wall,
        rss_after_bytes=rss,
        bytes_in_use_bytes=in_use[-1] if in_use else None,
        bytes_in_use_after_bytes=in_use,
        bytes_in_use_allocator=counted[-1] if counted else None,
        words=words,
    )


def _against(
    result: ConfigurationResult, baseline: ConfigurationResult | None, tolerance_bytes: int
) -> ConfigurationResult:
    from dataclasses import replace

    if result.skipped or baseline is None:
        return result
    if result is baseline:
        return replace(result, vs_baseline={"time_ratio": 1.0, "growth_change": "baseline"})
    ratio = None
    if result.seconds_per_trial and baseline.seconds_per_trial:
        ratio = result.seconds_per_trial / baseline.seconds_per_trial
    change = "unknown"
    if None not in (
        result.growth_ci_low_bytes_per_trial,
        result.growth_ci_high_bytes_per_trial,
        baseline.growth_ci_low_bytes_per_trial,
        baseline.growth_ci_high_bytes_per_trial,
    ):
        small = max(tolerance_bytes, 0.05 * abs(baseline.growth_bytes_per_trial or 0.0))
        diff = (result.growth_bytes_per_trial or 0.0) - (baseline.growth_bytes_per_trial or 0.0)
        if abs(diff) <= small:
            change = "no change"
        elif result.growth_ci_high_bytes_per_trial < baseline.growth_ci_low_bytes_per_trial:  # type: ignore[operator]
            change = "less"
        elif result.growth_ci_low_bytes_per_trial > baseline.growth_ci_high_bytes_per_trial:  # type: ignore[operator]
            change = "more"
        else:
            change = "no change"
    return replace(result, vs_baseline={"time_ratio": ratio, "growth_change": change})


def _recommend(results: Sequence[ConfigurationResult], baseline: ConfigurationResult | None) -> str:
    if baseline is None:
        return "Nothing was measured: every configuration was skipped (see the reasons above)."
    lines = [f"Baseline {baseline.label}: {baseline.words}, {_secs(baseline.seconds_per_trial)} per trial."]
    for r in results:
        if r is baseline or r.label == baseline.label:
            continue
        if r.skipped:
            lines.append(f"{r.label}: skipped ({r.skipped}).")
            continue
        change = r.vs_baseline.get("growth_change")
        ratio = r.vs_baseline.get("time_ratio")
        growth = {
            "no change": "no change to growth",
            "less": "less growth than the baseline",
            "more": "more growth than the baseline",
        }.get(str(change), "growth not comparable")
        speed = "" if ratio is None else f", {ratio:.2f}x the baseline's time per trial"
        lines.append(f"{r.label}: {r.words}; {growth}{speed}.")
    candidates = [
        r for r in results if not r.skipped and r.failures == 0 and r.growth_bytes_per_trial is not None
    ]
    if not candidates:
        lines.append("No configuration finished every trial: no recommendation.")
        return "\n".join(lines)
    flat = [r for r in candidates if not r.growing]
    if flat:
        best = min(flat, key=lambda r: r.seconds_per_trial or math.inf)
        why = "no significant growth" + (" and the fastest of those" if len(flat) > 1 else "")
    else:
        best = min(candidates, key=lambda r: r.growth_bytes_per_trial or 0.0)
        why = "the least growth; every configuration grows, so keep recycling workers (the Runner's default)"
    if best.label == baseline.label:
        lines.append(f"Recommendation: keep {best.label} ({why}).")
    else:
        lines.append(f"Recommendation: {best.label} ({why}).")
        lines.extend(_runner_caveat(baseline, best))
    return "\n".join(lines)


def _runner_caveat(baseline: ConfigurationResult, best: ConfigurationResult) -> list[str]:
    """When a switch away from a growing TensorFlow backend is recommended: say that compare keeps
    what the Runner's workers release (TensorFlow's custom-gradient graphs) and never recycles, so
    the growth it measured may already be gone under the Runner."""
    if not baseline.growing:
        return []
    backend = baseline.configuration.get("keras_backend") or "tensorflow"
    if backend != "tensorflow" or (best.configuration.get("keras_backend") or "tensorflow") == backend:
        return []
    return [
        f"Note: this growth was measured the way a plain loop grows, with TensorFlow's custom-gradient "
        f"graphs kept and no recycling; trainguard's Runner workers release those graphs and recycle "
        f"by default, so under the Runner {baseline.label} may not grow at all: run the trial there "
        f"(trainguard run, or trainguard.Runner) before switching backend."
    ]


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
