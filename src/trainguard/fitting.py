"""Fitting a training into memory: the batch-size search (:func:`find_batch_size`) and the flag a
trial function reads to know it is being probed (:func:`probing`).

Every probe runs in a fresh worker under the hard limit, so a probe that runs out of memory poisons
nothing: the next probe starts in a clean process. Retrying in the process that just failed is what
makes in-process finders report sizes that later fail, or fail at sizes that fit: the failed
allocation's memory and its fragmentation stay behind (``empty_cache()`` does not return them), and
TensorFlow can take minutes to recover from ``ResourceExhaustedError``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["probing", "PROBE_ENV", "find_batch_size", "FitResult", "Probe"]

#: Set to "1" in the workers of a batch-size probe.
PROBE_ENV = "TRAINGUARD_PROBE"


def probing() -> bool:
    """True inside a trial that :func:`find_batch_size` runs as a probe: run a few steps only.

    Returns:
        True in a probe's worker, False anywhere else.
    """
    return os.environ.get(PROBE_ENV) == "1"


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe: the size, how its fresh worker ended (``status``), its tree's peak RSS, and
    whether it fitted (ended ok with the peak under the limit less the margin)."""

    size: int
    status: str
    peak_rss_bytes: int | None
    fits: bool
    duration_s: float | None
    message: str = ""


@dataclass(frozen=True, slots=True)
class FitResult:
    """What :func:`find_batch_size` found.

    ``size`` is the largest size that fitted; ``budget_bytes`` the limit less the margin that the
    peak had to stay under; ``probes`` every probe in the order run; ``elapsed_s`` the search's
    wall time; ``stored`` whether the size was written to the store for later runs; ``capped``
    whether the search stopped at ``maximum`` while still fitting.
    """

    key: str
    size: int
    peak_rss_bytes: int | None
    limit_bytes: int | None
    gpu_limit_bytes: int | None
    budget_bytes: int | None
    margin: float
    probes: tuple[Probe, ...]
    elapsed_s: float
    device: str
    stored: bool = False
    capped: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (``fit --json``).

        Returns:
            The size found, the limit and every probe with its size, status and peak.
        """
        from dataclasses import asdict

        return asdict(self)

    def summary(self) -> str:
        """A few lines: the size, then every probe with its peak.

        Returns:
            The summary as text.
        """
        from trainguard.units import format_bytes

        budget = f"under {format_bytes(self.budget_bytes)}" if self.budget_bytes else "under the GPU limit"
        lines = [
            f"{self.key}={self.size}: the largest size whose peak stays {budget} "
            f"(limit {format_bytes(self.limit_bytes) if self.limit_bytes else '-'}, margin {self.margin:.0%}); "
            f"{len(self.probes)} probes in {self.elapsed_s:.1f} s"
            + (", stopped at maximum" if self.capped else "")
            + ("; stored for later runs" if self.stored else "")
        ]
        for probe in self.probes:
            verdict = "fits" if probe.fits else "does not fit"
            lines.append(
                f"  {self.key}={probe.size:<8} {probe.status:<16} peak {format_bytes(probe.peak_rss_bytes):>10}  {verdict}"
            )
        return "\n".join(lines)


def find_batch_size(
    fn: Callable[[dict[str, Any]], Any] | str,
    params: Mapping[str, Any] | None = None,
    key: str = "batch_size",
    *,
    memory_limit: str | int | None = None,
    gpu_memory_limit: str | int | None = None,
    margin: float = 0.1,
    minimum: int = 1,
    maximum: int | None = None,
    tolerance: float = 0.05,
    accumulate: str | None = None,
    timeout: str | float | None = None,
    store: Any = "trainguard.db",
    **runner_options: Any,
) -> FitResult:
    """The largest ``params[key]`` whose peak stays under the limit less the margin.

    Every probe runs ``fn`` once in a fresh worker under the hard limit (``memory_limit`` on the
    worker tree's RSS, ``gpu_memory_limit`` on its GPU memory), with :func:`probing` true so the
    function can run a few steps only. From ``params[key]`` the size doubles while it fits (halves
    while it does not), then bisects between the largest fitting and the smallest failing size
    until they are within ``tolerance`` (relative) of each other.

    Args:
        fn: the trial function (a callable, ``"pkg.module:fn"`` or ``"file.py:fn"``).
        params: the trial's params; ``params[key]`` is where the search starts.
        key: the integer parameter to size.
        memory_limit: hard limit on the worker tree's RSS ("4GB"); at least one limit is needed.
        gpu_memory_limit: hard limit on its GPU memory (NVML).
        margin: the fraction of ``memory_limit`` a fitting probe's peak must leave free, in [0, 0.9).
        minimum / maximum: the range searched (``maximum`` None: no upper bound).
        tolerance: stop bisecting when the bracket is within this fraction of the size (0: exact).
        accumulate: the params' gradient-accumulation key, left out of the stored lookup key like
            ``Shrink(accumulate=...)`` does, so a run with that rule finds this size.
        timeout: per-probe timeout ("5m").
        store: where the size is remembered for later runs (``Policy(on_oom=Shrink(key))`` starts
            there): a path, a ``Store``, or None.
        **runner_options: passed to :class:`trainguard.Runner` (``keras_backend``, ``threads``,
            ``env``, ``preload``, ``device``...).

    Returns:
        A :class:`FitResult` (``print(result.summary())``).

    Raises:
        ConfigError: no limit, a bad margin or range, ``key`` missing from ``params`` or not an integer.
        DoesNotFitError: even ``minimum`` did not fit (the message gives its peak).
        TrialError: a probe failed for another reason than memory (a bug in ``fn``).
    """
    from trainguard.runner import Policy, Runner, device_key
    from trainguard.runner import prepare_fn as prepare
    from trainguard.units import parse_duration, parse_size

    params = dict(params or {})
    limit = parse_size(memory_limit, name="memory_limit", allow_none=True)
    gpu_limit = parse_size(gpu_memory_limit, name="gpu_memory_limit", allow_none=True)
    start = _check_search(params, key, limit, gpu_limit, margin, tolerance, minimum, maximum)
    spec = prepare(fn)
    env = dict(runner_options.pop("env", None) or {})
    env[PROBE_ENV] = "1"
    policy = Policy(
        memory_limit=limit,
        gpu_memory_limit=gpu_limit,
        peak_ratio=None,
        predictive=False,
        timeout=parse_duration(timeout, name="timeout", allow_none=True),
    )
    runner_options.setdefault("sample_interval", "20ms")
    budget = int(limit * (1.0 - margin)) if limit else None
    started = time.monotonic()
    with Runner(workers=1, policy=policy, store=None, env=env, **runner_options) as runner:
        device = device_key(
            memory_limit=limit,
            gpu_memory_limit=gpu_limit,
            gpus=runner._config.gpu_slots,
            env=runner._config.base_env,
        )
        probe = _Prober(runner, spec.ref if spec.kind != "pickle" else fn, params, key, budget)
        lo, capped = search_size(probe, start, minimum=minimum, maximum=maximum, tolerance=tolerance)
        if lo is None:
            raise _does_not_fit(key, probe.probes[-1], budget, limit, gpu_limit, margin)
    elapsed = time.monotonic() - started
    stored = False
    if store is not None:
        _remember(store, spec.ref, params, key, accumulate, device, lo, margin, len(probe.probes), budget)
        stored = True
    return FitResult(
        key=key,
        size=lo.size,
        peak_rss_bytes=lo.peak_rss_bytes,
        limit_bytes=limit,
        gpu_limit_bytes=gpu_limit,
        budget_bytes=budget,
        margin=float(margin),
        probes=tuple(probe.probes),
        elapsed_s=elapsed,
        device=device,
        stored=stored,
        capped=capped,
        params=params,
    )


def _check_search(
    params: dict[str, Any],
    key: str,
    limit: int | None,
    gpu_limit: int | None,
    margin: Any,
    tolerance: Any,
    minimum: Any,
    maximum: Any,
) -> int:
    """Refuse a search that cannot run, in one line; return the size it starts from (set in
    ``params`` when absent)."""
    from trainguard.exceptions import ConfigError

    if not limit and not gpu_limit:
        raise ConfigError(
            "find_batch_size needs a hard limit to fit under: give memory_limit='4GB' (and/or gpu_memory_limit)"
        )
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0.0 <= margin < 0.9:
        raise ConfigError(f"margin={margin!r} must be a fraction in [0, 0.9), such as 0.1")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance < 1.0:
        raise ConfigError(f"tolerance={tolerance!r} must be a fraction in [0, 1), such as 0.05")
    for name, value in (("minimum", minimum), ("maximum", maximum)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
    if key not in params:
        params[key] = minimum if maximum is None else min(max(minimum, 32), maximum)
    start = params[key]
    if isinstance(start, bool) or not isinstance(start, int) or start < 1:
        raise ConfigError(
            f"params[{key!r}]={start!r} must be a whole number >= 1 to start the search from, such as 32"
        )
    if start < minimum:
        raise ConfigError(
            f"minimum={minimum} is above the starting {key}={start}: lower minimum or start larger"
        )
    if maximum is not None and maximum < max(start, minimum):
        raise ConfigError(f"maximum={maximum} is below the starting {key}={start}: raise maximum")
    return start


class _Prober:
    """One probe per size, each the trial once in a fresh worker; a size probed twice is read back."""

    def __init__(self, runner: Any, target: Any, params: dict[str, Any], key: str, budget: int | None):
        self.runner, self.target, self.params, self.key, self.budget = runner, target, params, key, budget
        self.cache: dict[int, Probe] = {}
        self.probes: list[Probe] = []

    def __call__(self, size: int) -> Probe:
        from trainguard.exceptions import TrialError
        from trainguard.runner.policy import OOM_STATUSES

        if size in self.cache:
            return self.cache[size]
        (result,) = self.runner.map(self.target, [{**self.params, self.key: size}])
        error = None if result.ok else result.error
        status = result.status if error is None else error.status
        message = "" if error is None else error.message
        if not result.ok and status not in OOM_STATUSES:
            raise TrialError(
                f"the probe at {self.key}={size} failed with {status} ({message[:300]}), not out of memory: "
                f"fix the trial function (run it once with trainguard run to see the traceback)",
                error=result.error,
            )
        peak = result.peak_rss_bytes
        fits = result.ok and (self.budget is None or (peak is not None and peak <= self.budget))
        out = Probe(size, status, peak, fits, result.duration_s, message)
        self.cache[size] = out
        self.probes.append(out)
        return out


def search_size(
    probe: Callable[[int], Probe], start: int, *, minimum: int, maximum: int | None, tolerance: float
) -> tuple[Probe | None, bool]:
    """The search, over any ``probe(size) -> Probe``: from ``start``, double while it fits (halve
    while it does not, down to ``minimum``), then bisect the bracket to within ``tolerance``.
    Returns the largest fitting probe (None when even ``minimum`` does not fit) and whether the
    search stopped at ``maximum``."""
    lo: Probe | None = None
    hi: Probe | None = None
    capped = False
    first = probe(start)
    if first.fits:
        lo = first
        while hi is None:
            if maximum is not None and lo.size >= maximum:
                capped = True
                break
            nxt = probe(lo.size * 2 if maximum is None else min(lo.size * 2, maximum))
            lo, hi = (nxt, None) if nxt.fits else (lo, nxt)
    else:
        hi = first
        while hi.size > minimum and lo is None:
            nxt = probe(max(minimum, hi.size // 2))
            lo, hi = (nxt, hi) if nxt.fits else (None, nxt)
        if lo is None:
            return None, False
    while hi is not None and hi.size - lo.size > max(1, int(lo.size * tolerance)):
        mid = probe((lo.size + hi.size) // 2)
        lo, hi = (mid, hi) if mid.fits else (lo, mid)
    return lo, capped


def _does_not_fit(
    key: str, hi: Probe, budget: int | None, limit: int | None, gpu_limit: int | None, margin: float
) -> Exception:
    from trainguard.exceptions import DoesNotFitError
    from trainguard.units import format_bytes

    over = (
        f"{format_bytes(budget)} (limit {format_bytes(limit)} less {margin:.0%})"
        if budget
        else (f"the GPU limit {format_bytes(gpu_limit)}")
    )
    return DoesNotFitError(
        f"even {key}={hi.size} does not fit: it {hi.status.replace('_', ' ')} with a peak of "
        f"{format_bytes(hi.peak_rss_bytes)}, over {over}: raise the limit or make the model smaller",
        key=key,
        size=hi.size,
        peak_bytes=hi.peak_rss_bytes,
        limit_bytes=limit,
    )


def _remember(
    store: Any,
    ref: str,
    params: dict[str, Any],
    key: str,
    accumulate: str | None,
    device: str,
    lo: Probe,
    margin: float,
    probes: int,
    budget: int | None,
) -> None:
    """Keep the size for later runs (``Policy(on_oom=Shrink(key))`` starts there)."""
    from trainguard.runner.policy import params_without
    from trainguard.store import Store

    own = not isinstance(store, Store)
    handle = Store(store) if own else store
    try:
        handle.remember_size(
            ref,
            params_without(params, [key, accumulate]),
            device,
            key,
            lo.size,
            peak_rss_bytes=lo.peak_rss_bytes,
            source="fit",
            detail={"margin": margin, "probes": probes, "budget_bytes": budget},
        )
    finally:
        if own:
            handle.close()
