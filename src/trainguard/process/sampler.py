"""The background sampler and its frozen timeline."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.process.probes import ProbeFn, build_probes
from trainguard.process.tree import ProcessTree
from trainguard.process.watch import Watchdog
from trainguard.units import parse_duration

__all__ = ["Marker", "Timeline", "Sampler"]

logger = logging.getLogger(__name__)

Number = int | float


@dataclass(frozen=True, slots=True)
class Marker:
    """A user mark: ``time_s`` since the sampler started, a ``name``, an optional ``value`` (e.g. the
    iteration number) and ``readings``, every probe read synchronously at the mark."""

    time_s: float
    name: str
    value: Any
    readings: Mapping[str, Number | None]


@dataclass(frozen=True, slots=True)
class Timeline:
    """A frozen copy of what a :class:`Sampler` recorded.

    ``times_s`` are seconds since the sampler started; ``values[probe]`` runs parallel to it.
    When the sampler ran out of room, neighbouring samples were merged (time of the first, the
    maximum of the values, so peaks survive): ``stride`` is how many raw samples each point holds.
    ``peaks`` are exact maxima over every raw sample, merged or not. Markers are never merged.
    """

    times_s: tuple[float, ...]
    values: Mapping[str, tuple[Number | None, ...]]
    markers: tuple[Marker, ...]
    interval_s: float
    stride: int
    started_unix_s: float
    peaks: Mapping[str, Number | None] = field(default_factory=dict)

    @property
    def probes(self) -> tuple[str, ...]:
        return tuple(self.values)

    def __len__(self) -> int:
        return len(self.times_s)

    def series(self, probe: str) -> tuple[Number | None, ...]:
        """The sampled values of one probe, parallel to ``times_s``.

        Raises:
            ConfigError: ``probe`` was not sampled.

        Args:
            probe: the probe's name, e.g. ``"rss_bytes"``.

        Returns:
            One value per sample (None where the probe could not read).
        """
        self._check_probe(probe)
        return self.values[probe]

    def markers_named(self, name: str) -> tuple[Marker, ...]:
        """The markers recorded under ``name``, in order.

        Args:
            name: the marker name, e.g. ``"iter_end"``.

        Returns:
            The markers, each with its time, value and readings.
        """
        return tuple(m for m in self.markers if m.name == name)

    def values_at_markers(self, name: str, probe: str | None = None) -> tuple[Number | None, ...]:
        """The probe's reading taken at each marker called ``name``, in order.

        Args:
            name: the marker name, e.g. ``"iter_end"``.
            probe: the probe; defaults to the first (``rss_bytes`` by default).

        Returns:
            One reading per marker (None where the probe could not read).
        """
        probe = probe or self.probes[0]
        self._check_probe(probe)
        return tuple(m.readings.get(probe) for m in self.markers if m.name == name)

    def marker_values(self, name: str) -> tuple[Any, ...]:
        """The ``value`` given to each ``mark(name, value)``, in order.

        Args:
            name: the marker name.

        Returns:
            The values, one per marker.
        """
        return tuple(m.value for m in self.markers if m.name == name)

    def peak(self, probe: str | None = None) -> Number | None:
        """The exact highest reading of a probe over every raw sample, merged ones included.

        Args:
            probe: the probe; defaults to the first (``rss_bytes`` by default).

        Returns:
            The peak, or None when the probe never read.
        """
        probe = probe or self.probes[0]
        self._check_probe(probe)
        return self.peaks.get(probe)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form.

        Returns:
            The probes, times, series and markers as plain JSON values.
        """
        return {
            "times_s": list(self.times_s),
            "values": {k: list(v) for k, v in self.values.items()},
            "markers": [
                {"time_s": m.time_s, "name": m.name, "value": m.value, "readings": dict(m.readings)}
                for m in self.markers
            ],
            "interval_s": self.interval_s,
            "stride": self.stride,
            "started_unix_s": self.started_unix_s,
            "peaks": dict(self.peaks),
        }

    def _check_probe(self, probe: str) -> None:
        if probe not in self.values:
            raise ConfigError(
                f"probe {probe!r} was not sampled: this timeline has {', '.join(self.values) or 'no probes'}",
                value=probe,
            )


def _merge_max(a: Number | None, b: Number | None) -> Number | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


class Sampler:
    """A daemon thread that reads probes every ``interval_s`` into a bounded timeline.

    Example::

        with Sampler(interval_s=0.1) as sampler:
            for i in range(10):
                train_once()
                sampler.mark("iter_end", i)
        rss_at_ends = sampler.timeline.values_at_markers("iter_end")

    Memory is bounded by ``max_samples``: when the buffer fills, neighbouring samples are merged
    in pairs (max of values) and later samples are pooled two at a time, and so on, so a
    sampler can run for days at a fixed cost. Markers are kept in full.

    Args:
        probes: ``None`` (this process tree's RSS as ``rss_bytes``), a list of built-in names
            (``rss_bytes``, ``process_rss_bytes``, ``uss_bytes``, ``gpu_bytes``,
            ``system_available_bytes``, ``cgroup_usage_bytes``), or a dict ``{name: callable}``
            of functions returning a number or None.
        interval_s: seconds (or a duration string such as ``"100ms"``) between samples, > 0.
        max_samples: points kept before merging, at least 16.
        pid: the root of the process tree the built-in probes read (default: this process).

    Raises:
        ConfigError: a bad interval, ``max_samples`` or probe specification.
    """

    def __init__(
        self,
        probes: Sequence[str] | Mapping[str, ProbeFn | str] | None = None,
        *,
        interval_s: float | str = 0.1,
        max_samples: int = 10_000,
        pid: int | None = None,
    ) -> None:
        interval = parse_duration(interval_s, name="interval_s")
        if interval is None or interval <= 0 or not math.isfinite(interval):
            raise ConfigError(f"interval_s={interval_s!r} must be positive, such as 0.1 or '100ms'")
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 16:
            raise ConfigError(f"max_samples={max_samples!r} must be an integer >= 16, such as 10_000")
        self.interval_s: float = float(interval)
        self.max_samples: int = max_samples
        self.pid: int = pid or os.getpid()
        # the tree the built-in probes read; its statm files stay open until close()
        self._tree = ProcessTree(self.pid)
        self._probes: dict[str, ProbeFn] = build_probes(probes, self._tree)
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._values: dict[str, list[Number | None]] = {name: [] for name in self._probes}
        self._peaks: dict[str, Number | None] = {name: None for name in self._probes}
        self._markers: list[Marker] = []
        self._stride = 1
        self._pool: tuple[float, dict[str, Number | None]] | None = None
        self._pool_n = 0
        self._t0 = time.monotonic()
        self._started_unix_s = time.time()
        self._thread: Watchdog | None = None
        self._closed = False
        self._failed: set[str] = set()
        self._thread_cpu_s = 0.0
        self._cpu0: float | None = None

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> Sampler:
        """Start the thread (idempotent). Returns self.

        Raises:
            ConfigError: the sampler was closed; create a new one.

        Returns:
            This sampler, so ``sampler = Sampler().start()`` works.
        """
        with self._lock:
            if self._closed:
                raise ConfigError("this Sampler is closed: create a new Sampler to sample again")
            if self._thread is not None:
                return self
            self._t0 = time.monotonic()
            self._started_unix_s = time.time()
            self._thread = Watchdog(self._tick, self.interval_s, name="trainguard-sampler", what="sampling")
        self._record(self._read())
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and take a last sample. Safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.stop(timeout_s=None)
            self._record(self._read())
        self._tree.close()
        self._flush_pool()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._closed

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the sampling thread itself has used (its own thread clock)."""
        return self._thread_cpu_s

    # recording -------------------------------------------------------------------------------

    def mark(self, name: str, value: Any = None) -> Marker:
        """Record a marker now, with every probe read synchronously at this instant.

        Args:
            name: e.g. ``"iter_start"`` or ``"iter_end"``.
            value: anything small and JSON-friendly, e.g. the iteration number.

        Raises:
            ConfigError: ``name`` is not a non-empty string.

        Returns:
            The recorded marker, with its time and every probe's reading.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"marker name must be a non-empty string such as 'iter_end', not {name!r}")
        readings = self._read()
        marker = Marker(
            time_s=time.monotonic() - self._t0, name=name, value=value, readings=MappingProxyType(readings)
        )
        with self._lock:
            self._markers.append(marker)
            for probe, v in readings.items():
                self._peaks[probe] = _merge_max(self._peaks[probe], v)
        return marker

    def sample(self) -> dict[str, Number | None]:
        """Take one sample now (in the caller's thread) and record it; returns the readings.

        Returns:
            Each probe's reading by name (None where a probe could not read).
        """
        readings = self._read()
        self._record(readings)
        return readings

    @property
    def timeline(self) -> Timeline:
        """A frozen copy of everything recorded so far (also valid after ``close()``)."""
        with self._lock:
            times = list(self._times)
            values = {k: list(v) for k, v in self._values.items()}
            if self._pool is not None:
                times.append(self._pool[0])
                for k, v in self._pool[1].items():
                    values[k].append(v)
            return Timeline(
                times_s=tuple(times),
                values=MappingProxyType({k: tuple(v) for k, v in values.items()}),
                markers=tuple(self._markers),
                interval_s=self.interval_s,
                stride=self._stride,
                started_unix_s=self._started_unix_s,
                peaks=MappingProxyType(dict(self._peaks)),
            )

    # internals -------------------------------------------------------------------------------

    def _read(self) -> dict[str, Number | None]:
        out: dict[str, Number | None] = {}
        for name, fn in self._probes.items():
            try:
                value = fn()
            except Exception as err:  # a probe failing must not kill the thread
                if name not in self._failed:
                    self._failed.add(name)
                    logger.warning("sampler probe %s failed (further failures not logged): %s", name, err)
                value = None
            out[name] = value
        return out

    def _record(self, readings: dict[str, Number | None]) -> None:
        now = time.monotonic() - self._t0
        with self._lock:
            for k, v in readings.items():
                self._peaks[k] = _merge_max(self._peaks[k], v)
            if self._stride == 1:
                self._append(now, readings)
            else:
                if self._pool is None:
                    self._pool = (now, dict(readings))
                    self._pool_n = 1
                else:
                    pooled = self._pool[1]
                    for k, v in readings.items():
                        pooled[k] = _merge_max(pooled[k], v)
                    self._pool_n += 1
                if self._pool_n >= self._stride:
                    t, vals = self._pool
                    self._pool = None
                    self._pool_n = 0
                    self._append(t, vals)

    def _append(self, t: float, readings: Mapping[str, Number | None]) -> None:
        # caller holds the lock
        self._times.append(t)
        for k, v in readings.items():
            self._values[k].append(v)
        if len(self._times) >= self.max_samples:
            self._halve()

    def _halve(self) -> None:
        # merge neighbours: time of the first, max of the values, so peaks are never lost
        self._times = self._times[0::2]
        for k, vals in self._values.items():
            merged = [
                _merge_max(vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i]
                for i in range(0, len(vals), 2)
            ]
            self._values[k] = merged
        self._stride *= 2

    def _flush_pool(self) -> None:
        with self._lock:
            if self._pool is not None:
                t, vals = self._pool
                self._pool = None
                self._pool_n = 0
                self._append(t, vals)

    def _tick(self) -> None:
        """One watchdog pass (its thread): read the probes into the timeline, and the thread's CPU."""
        if self._cpu0 is None:
            self._cpu0 = time.thread_time()
        self._record(self._read())
        self._thread_cpu_s = time.thread_time() - self._cpu0
