"""The flight recorder: the last seconds of a worker tree's samples at full rate, kept by the
supervisor, and what it stores with an attempt that ended in a memory kill, an OOM or a crash.

In-process dumps at an OOM are unreliable (by then the process cannot allocate); the supervisor,
outside, already holds the samples. One :class:`FlightRecorder` per worker: the sampler thread
appends, the loop thread takes a :meth:`snapshot` at the end. A ring bounded by time (and by count,
so a fast sample interval cannot grow it without bound); never downsampled.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from trainguard.runner.policy import growth_rate

__all__ = ["FlightRecorder", "FLIGHT_WINDOW_S", "FLIGHT_MAX_SAMPLES"]

#: seconds of samples kept (the "last seconds" shown after a kill)
FLIGHT_WINDOW_S = 10.0
#: at most this many samples whatever the interval (10 s at 10 ms)
FLIGHT_MAX_SAMPLES = 1000


class FlightRecorder:
    """A ring of ``(monotonic_s, wall_s, rss_bytes, gpu_bytes)`` samples over the last ``window_s``."""

    def __init__(self, window_s: float = FLIGHT_WINDOW_S, max_samples: int = FLIGHT_MAX_SAMPLES) -> None:
        self.window_s = float(window_s)
        self._ring: deque[tuple[float, float, int, int | None]] = deque(maxlen=max_samples)
        self._lock = threading.Lock()

    def add(self, mono_s: float, wall_s: float, rss_bytes: int, gpu_bytes: int | None = None) -> None:
        with self._lock:
            self._ring.append((mono_s, wall_s, int(rss_bytes), gpu_bytes))
            cut = mono_s - self.window_s
            while self._ring and self._ring[0][0] < cut:
                self._ring.popleft()

    def clear(self) -> None:
        """Forget the samples (a new trial starts: its recorder shows only its own seconds)."""
        with self._lock:
            self._ring.clear()

    def rss_series(self) -> list[tuple[float, int]]:
        """``(monotonic_s, rss_bytes)`` pairs, oldest first (what the pressure rate is read from)."""
        with self._lock:
            return [(m, r) for m, _w, r, _g in self._ring]

    def __len__(self) -> int:
        with self._lock:
            return len(self._ring)

    def snapshot(
        self,
        *,
        cause: str,
        processes: list[dict[str, Any]] | None = None,
        census: Any = None,
        allocator: dict[str, Any] | None = None,
        exact_peak: dict[str, Any] | None = None,
        torch_memory_snapshot: str | None = None,
    ) -> dict[str, Any]:
        """What is stored with the attempt (JSON-ready): the samples as offsets from the last one
        (``t_s`` <= 0) with wall times, the growth rate over the last seconds, the tree's processes
        with their RSS, the last census and allocator stats the worker sent, the kernel's exact
        peak beside the sampled one where a cgroup keeps it, and a CUDA memory snapshot's path."""
        with self._lock:
            ring = list(self._ring)
        samples: list[dict[str, Any]] = []
        end = ring[-1][0] if ring else 0.0
        for mono, wall, rss, gpu in ring:
            row: dict[str, Any] = {"t_s": round(mono - end, 4), "at": wall, "rss_bytes": rss}
            if gpu is not None:
                row["gpu_bytes"] = gpu
            samples.append(row)
        rate = growth_rate([(m, r) for m, _w, r, _g in ring])
        sampled_peak = max((r for _m, _w, r, _g in ring), default=None)
        out: dict[str, Any] = {
            "cause": cause,
            "window_s": self.window_s,
            "samples": samples,
            "growth_bytes_per_s": rate,
            "sampled_peak_bytes": sampled_peak,
            "processes": processes or [],
            "census": census,
            "allocator": allocator,
        }
        if exact_peak is not None:
            out["exact_peak"] = dict(exact_peak)
            if sampled_peak is not None and exact_peak.get("peak_bytes") is not None:
                # what the sampler missed between two samples: the kernel's own high-water mark
                out["exact_peak"]["sampled_shortfall_bytes"] = int(exact_peak["peak_bytes"]) - sampled_peak
            sampled_gpu = max((g for _m, _w, _r, g in ring if g is not None), default=None)
            if sampled_gpu is not None and exact_peak.get("gpu_peak_bytes") is not None:
                out["exact_peak"]["gpu_sampled_shortfall_bytes"] = (
                    int(exact_peak["gpu_peak_bytes"]) - sampled_gpu
                )
        if torch_memory_snapshot is not None:
            out["torch_memory_snapshot"] = torch_memory_snapshot
        return out
