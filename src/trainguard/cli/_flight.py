"""What ``trainguard show`` says about memory pressure and flight recorders: the pressure events
(each once; a trial that ignored the flag said once), and per attempt of ``show RUN --trial N`` its
flight recorder (the last seconds before a kill, OOM or crash)."""

from __future__ import annotations

from typing import Any

from trainguard.outcomes import plain_record

__all__ = ["attempt_rows", "print_pressure", "print_flight_recorders", "print_trial", "IGNORED_WORDS"]

#: what ``show`` says, once, for a run whose trial was under pressure and killed at its hard limit
IGNORED_WORDS = "pressure ignored; killed at the hard limit"


def attempt_rows(attempts: Any) -> list[dict[str, Any]]:
    """Attempts as JSON rows, with ``"flight_recorder"`` on the attempt (taken out of its error)."""
    rows = []
    for a in attempts:
        row = plain_record(a)
        error = dict(row.get("error") or {})
        row["flight_recorder"] = error.pop("flight_recorder", None)
        row["error"] = error or None
        rows.append(row)
    return rows


def print_pressure(out: Any, events: Any) -> None:
    """The run's pressure events: checkpoints each on a line, the ignored ones in one line."""
    from trainguard.cli._display import markup_safe

    if not events:
        return
    out.print("[bold]memory pressure[/] (soft_limit)")
    ignored = []
    for e in events:
        data = e.data if isinstance(e.data, dict) else {}
        if data.get("action") == "ignored":
            ignored.append(f"trial {e.index} attempt {data.get('attempt')}")
            continue
        out.print("  " + markup_safe(e.message))
    if ignored:
        out.print(f"  [red]{IGNORED_WORDS}[/]: " + markup_safe(", ".join(ignored)))


def print_flight_recorders(out: Any, index: int, rows: list[dict[str, Any]]) -> None:
    """``show RUN --trial N``: each attempt, and the flight recorder of those that have one."""
    from trainguard._flight import flight_summary
    from trainguard.cli._display import markup_safe, sparkline
    from trainguard.units import format_bytes

    out.print(f"[bold]trial {index}[/]: {len(rows)} attempt{'s' if len(rows) != 1 else ''}")
    for row in rows:
        error = row.get("error") or {}
        words = error.get("message") or ""
        out.print(
            f"  attempt {row['attempt']} on worker {row['worker_id']}: {markup_safe(row['status'])}"
            + (f" ({markup_safe(words)})" if words else "")
            + f", peak {format_bytes(row.get('peak_rss_bytes'))}"
        )
        recorder = row.get("flight_recorder")
        if not recorder:
            continue
        out.print("    flight recorder: " + markup_safe(flight_summary(recorder)))
        rss = [int(s["rss_bytes"]) for s in recorder.get("samples") or []]
        if rss:
            out.print(f"    {sparkline(rss, 80)}  {format_bytes(min(rss))} .. {format_bytes(max(rss))}")
        for proc in (recorder.get("processes") or [])[:8]:
            out.print(
                f"    pid {proc['pid']} {markup_safe(proc.get('name'))}: {format_bytes(proc.get('rss_bytes'))}"
            )
        census = recorder.get("census")
        if census:
            out.print("    last census the worker sent: " + markup_safe(str(census)[:300]))
        allocator = recorder.get("allocator")
        if allocator:
            out.print("    allocator: " + markup_safe(str(allocator)[:300]))


def print_trial(index: int, rows: list[dict[str, Any]], pressure_events: Any) -> None:
    """``show RUN --trial N``: the trial's attempts with their flight recorders, then its pressures."""
    from trainguard.cli._display import console

    out = console(pipe_width=160)
    print_flight_recorders(out, index, rows)
    print_pressure(out, [e for e in pressure_events if e.index == index])
