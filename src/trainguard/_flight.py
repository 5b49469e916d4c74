"""A flight recorder in words (one line), shared by ``show``, the run report and the runner's face.
The record itself is made by ``runner/_flight_recorder.py``; its shape is the JSON stored with an
attempt (``"flight_recorder"``)."""

from __future__ import annotations

from typing import Any

__all__ = ["flight_summary"]


def flight_summary(recorder: dict[str, Any]) -> str:
    """One line for ``show``: how many samples over how long, the growth rate, the peak.

    Args:
        recorder: an attempt's flight recorder, as stored.

    Returns:
        The line.
    """
    from trainguard.units import format_bytes

    samples = recorder.get("samples") or []
    span = -float(samples[0]["t_s"]) if samples else 0.0
    rate = recorder.get("growth_bytes_per_s")
    parts = [f"{len(samples)} samples over the last {span:.1f} s"]
    if rate is not None:
        parts.append(f"growing {format_bytes(rate, signed=True)}/s")
    if recorder.get("sampled_peak_bytes") is not None:
        parts.append(f"sampled peak {format_bytes(recorder['sampled_peak_bytes'])}")
    exact = recorder.get("exact_peak") or {}
    if exact.get("peak_bytes") is not None:
        parts.append(
            f"exact peak {format_bytes(exact['peak_bytes'])} ({exact.get('source')}; the samples missed "
            f"{format_bytes(exact.get('sampled_shortfall_bytes'))})"
        )
    procs = recorder.get("processes") or []
    if procs:
        parts.append(f"{len(procs)} process{'es' if len(procs) != 1 else ''} in the tree")
    return ", ".join(parts)
