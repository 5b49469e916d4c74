"""The LeakReport record and its text/JSON forms."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from trainguard.leaks.stats import Verdict
from trainguard.units import format_bytes, format_duration

__all__ = ["LeakReport", "KindGrowth", "StepError"]


@dataclass(frozen=True, slots=True)
class KindGrowth:
    """How one census kind (or allocation site) grows, per iteration, over the settled part."""

    kind: str
    count_per_iter: float
    bytes_per_iter: float
    detail: str = ""
    #: who holds a sample of what grows: a chain of references from a named root (a global, a
    #: local in a named frame, a framework registry), see trainguard.leaks.holders
    holder: str = ""

    def describe(self) -> str:
        parts = []
        if self.count_per_iter:
            parts.append(f"{self.count_per_iter:+,.1f} {self.kind}/iter")
        if self.bytes_per_iter:
            parts.append(f"{format_bytes(self.bytes_per_iter, signed=True)}/iter")
        text = ", ".join(parts) if parts else f"{self.kind}: no growth"
        if not self.count_per_iter and self.bytes_per_iter:
            text = f"{self.kind}: {text}"
        return text + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True, slots=True)
class StepError:
    """The step raised: where, what, and the traceback text."""

    iteration: int
    exc_type: str
    message: str
    traceback: str


@dataclass(frozen=True, slots=True)
class LeakReport:
    """The answer of :func:`trainguard.leakcheck`.

    Attributes:
        verdict: leak, no_leak, plateau or inconclusive.
        reason: why, in words.
        metric: the host metric decided on (rss, uss or pss, summed over the process tree).
        slope_bytes_per_iter: robust (Theil-Sen) growth per step call after the warm-up.
        ci_low_bytes_per_iter: lower end of its 95 % interval.
        ci_high_bytes_per_iter: upper end of its 95 % interval.
        least_squares_bytes_per_iter: the plain least-squares slope over the same part, for comparison.
        iterations: step calls made (setup excluded).
        warmup_iterations: calls before the series settled (excluded from the slope).
        measurements: readings taken (one every ``calls_per_measurement`` calls, plus a baseline).
        calls_per_measurement: calls between two readings (more than 1 for fast steps).
        tolerance_bytes_per_iter: growth below this is not a leak.
        elapsed_s: wall time of the check, setup excluded.
        step_time_s: median time of one call.
        series: one dict per reading: ``iteration``, ``elapsed_s``, ``bytes`` (the metric decided
            on), ``untrimmed_bytes`` (before ``malloc_trim``; None without it), ``gpu_allocated_bytes``
            and ``gpu_nvml_bytes`` (None without a GPU), ``processes``; with metric ``auto`` on a
            tree, ``pss_bytes``/``rss_bytes``; a Node check adds the V8 heap and TF.js counts
            (``heap_used_bytes``, ``tf_num_bytes``...).
        growth_by_kind: census kinds (and allocation sites) that grow, largest first.
        hints: framework-specific explanations (retracing, Keras global state, autograd graphs).
        gpu: the same analysis on GPU memory, when a GPU allocator or NVML was seen.
        retention: the malloc_trim(0) check: growth of memory the allocator keeps versus live memory.
        error: the exception raised by the step, if any (the series up to it is kept).
        isolated: whether it ran in a fresh process.
        counts: the count evidence: ``status`` (supports_leak, plateau, no_support, found_nothing,
            left_out), ``note`` in words, ``kinds`` (each kind whose exact count rose, with
            its trend, see :func:`trainguard.leaks.stats.count_trend`), and the census cost.
        allocator: the C allocator's bytes in use (``allocated_bytes`` in each row, the check's own
            bookkeeping subtracted): ``allocator`` (glibc, jemalloc, tcmalloc), ``available``,
            ``slope_bytes_per_iter``, ``status`` (``stats.allocator_trend``), ``supports_leak``,
            ``cost_per_reading_s``, ``bookkeeping_bytes_per_reading``, ``text`` and ``note``
            (allocator retention; child processes not counted; or why it is unavailable). On
            glibc, RSS split at malloc's heaps (``heap_resident_bytes``, ``outside_heaps_bytes``
            and ``live_bytes`` in the rows that could afford it): ``heaps_available``,
            ``heap_resident_slope_bytes_per_iter``, ``outside_heaps_slope_bytes_per_iter``,
            ``live_slope_bytes_per_iter``, ``heaps_cost_per_reading_s`` and ``heaps_text``.
    """

    verdict: Verdict
    reason: str
    metric: str
    slope_bytes_per_iter: float | None
    ci_low_bytes_per_iter: float | None
    ci_high_bytes_per_iter: float | None
    least_squares_bytes_per_iter: float | None
    iterations: int
    warmup_iterations: int
    measurements: int
    calls_per_measurement: int
    tolerance_bytes_per_iter: float
    elapsed_s: float
    step_time_s: float | None
    series: tuple[dict[str, Any], ...] = ()
    growth_by_kind: tuple[KindGrowth, ...] = ()
    hints: tuple[str, ...] = ()
    gpu: dict[str, Any] | None = None
    retention: dict[str, Any] | None = None
    error: StepError | None = None
    isolated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, Any] | None = None
    allocator: dict[str, Any] | None = None

    @property
    def leaked(self) -> bool:
        return self.verdict is Verdict.LEAK

    def sampling_text(self) -> str:
        """How the calls were read, in words that add up: ``'15 calls (5 warm-up), 16 readings: a
        baseline, then one after every call'``. The gaps come from the series itself (a check that
        reads call by call while memory rises reads more often than its planned
        ``calls_per_measurement``).

        Returns:
            One sentence; empty when there are no readings.
        """
        calls = (
            f"{self.iterations} call{'s' if self.iterations != 1 else ''} ({self.warmup_iterations} warm-up)"
        )
        marks = [int(r["iteration"]) for r in self.series if isinstance(r.get("iteration"), (int, float))]
        readings = len(marks) or self.measurements
        text = f"{calls}, {readings} reading{'s' if readings != 1 else ''}"
        gaps = sorted({b - a for a, b in zip(marks, marks[1:], strict=False) if b > a})
        if not gaps:
            return text
        if gaps == [1]:
            every = "one after every call"
        elif len(gaps) == 1:
            every = f"one every {gaps[0]} calls"
        else:
            every = f"one every {gaps[0]} to {gaps[-1]} calls"
        return f"{text}: a baseline, then {every}" if marks[0] == 0 else f"{text}, {every}"

    def counts_note(self) -> str:
        """The census's note on counts, unless the reason or a hint already says it.

        Returns:
            The note, or an empty string.
        """
        note = str((self.counts or {}).get("note") or "")
        if not note or note in self.reason or any(note in h for h in self.hints):
            return ""
        return note

    def bytes_note(self) -> str:
        """When the kinds that grow hold little of the memory growth: say where the rest is, rather
        than let a count with no bytes read as the whole answer.

        Returns:
            One sentence, or an empty string when the growing kinds account for the growth.
        """
        slope = self.slope_bytes_per_iter
        if self.verdict is not Verdict.LEAK or not slope or slope <= 0:
            return ""
        kinds = [g for g in self.growth_by_kind if g.detail not in ("by dtype and shape", "tracemalloc")]
        sites = [g for g in self.growth_by_kind if g.detail.startswith("tracemalloc")]
        if not kinds and not sites:
            return ""  # nothing was counted: no basis for saying where the bytes are
        held = max(sum(max(g.bytes_per_iter, 0.0) for g in group) for group in (kinds, sites))
        if held >= 0.5 * slope:
            return ""
        return (
            f"the kinds above hold {format_bytes(held, signed=True)}/iter of the "
            f"{format_bytes(slope, signed=True)}/iter growth: the rest is outside Python-visible objects "
            "(native memory of a framework or C extension, or the allocator)"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``--json`` output).

        Returns:
            The verdict, the series, the slope with its interval, what grows and the check's settings.
        """
        data = asdict(self)
        data["verdict"] = self.verdict.value
        data["growth_by_kind"] = [asdict(g) | {"text": g.describe()} for g in self.growth_by_kind]
        data["series"] = list(self.series)
        data["hints"] = list(self.hints)
        data["bytes_note"] = self.bytes_note()
        return data

    def to_json(self, **kwargs: Any) -> str:
        """The report as JSON text (the ``--json`` output).

        Args:
            **kwargs: passed to :func:`json.dumps` (``indent=2``, ...).

        Returns:
            The JSON text of :meth:`to_dict`.
        """
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LeakReport:
        """Rebuild a report from :meth:`to_dict`'s output (a stored or ``--json`` report).

        Args:
            data: the dict, as :meth:`to_dict` made it.

        Returns:
            The report.
        """
        d = dict(data)
        d["verdict"] = Verdict(d["verdict"])
        d["growth_by_kind"] = tuple(
            KindGrowth(
                g["kind"], g["count_per_iter"], g["bytes_per_iter"], g.get("detail", ""), g.get("holder", "")
            )
            for g in d.get("growth_by_kind", ())
        )
        d["series"] = tuple(d.get("series", ()))
        d["hints"] = tuple(d.get("hints", ()))
        err = d.get("error")
        d["error"] = StepError(**err) if err else None
        d.pop("bytes_note", None)
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in fields})

    def summary(self) -> str:
        """A few lines a person reads: verdict, rate, what grows, hints.

        Returns:
            The summary, one finding a line.
        """

        def b(v: float | None) -> str:
            return format_bytes(v, signed=True) if v is not None else "-"

        lines = [f"verdict: {self.verdict.value} -- {self.reason}"]
        if self.slope_bytes_per_iter is not None:
            lines.append(
                f"growth: {b(self.slope_bytes_per_iter)}/iter "
                f"(95% CI {b(self.ci_low_bytes_per_iter)} .. {b(self.ci_high_bytes_per_iter)}) of {self.metric}, "
                f"{self.sampling_text()}, "
                f"{format_duration(self.step_time_s)} per iteration"
            )
        for g in self.growth_by_kind[:8]:
            lines.append(f"  grows: {g.describe()}")
            if g.holder:
                lines.append(f"    held by: {g.holder}")
        if self.bytes_note():
            lines.append(f"bytes: {self.bytes_note()}")
        if self.counts_note():
            lines.append(f"counts: {self.counts_note()}")
        if self.gpu:
            lines.append(f"gpu: {self.gpu.get('verdict')} -- {self.gpu.get('reason')}")
        if self.retention and self.retention.get("note"):
            lines.append(f"allocator: {self.retention['note']}")
        if self.allocator:
            lines.append(f"bytes in use: {self.allocator.get('text') or self.allocator.get('note')}")
            if self.allocator.get("text") and self.allocator.get("note"):
                lines.append(f"bytes in use: {self.allocator['note']}")
            if self.allocator.get("heaps_text"):
                lines.append(f"heaps: {self.allocator['heaps_text']}")
        for h in self.hints:
            lines.append(f"hint: {h}")
        if self.error is not None:
            lines.append(
                f"error at iteration {self.error.iteration}: {self.error.exc_type}: {self.error.message}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_html(self, path: str, *, title: str | None = None) -> str:
        """Write a self-contained HTML report (series, warm-up cut, slope with its 95 % band, verdict,
        what grows) that opens offline; see :mod:`trainguard.report`. Returns the path.

        Args:
            path: the file to write (a regular file is replaced atomically).
            title: the page's title; by default the step's name and the verdict.

        Returns:
            The path written.
        """
        from trainguard.report import render_leak_html, write_html

        return str(write_html(path, render_leak_html(self, title=title), flag="path="))

    def plot(self, path: str) -> str:
        """Write a picture of the series (PNG or SVG by extension); see :mod:`trainguard.leaks.plot`.

        Args:
            path: the file to write; ``.png`` or ``.svg``.

        Returns:
            The path written.
        """
        from trainguard.leaks.plot import plot_report

        return plot_report(self, path)
