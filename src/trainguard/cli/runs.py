"""``trainguard runs``: list the runs in a store, with trial counts, duration and peak memory."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Literal

HELP = "list the runs in a store: status, trials ok/failed/pending, duration, peak RSS"


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_run_in_store

    add_run_in_store(parser, run=False)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from trainguard.store import Store, interrupted_note

    with Store(args.store, readonly=True) as store:
        summaries = store.list_runs()
        notes = {s.name: interrupted_note(store.path, s.name, s.status) for s in summaries}
    if args.json:
        from trainguard.cli._display import to_json

        rows = [{**dataclasses.asdict(s), "note": notes[s.name]} for s in summaries]
        print(to_json({"store": str(args.store), "runs": rows}, indent=2))
        return 0
    from rich.table import Table

    from trainguard.cli._display import console, when
    from trainguard.cli._display import markup_safe as escape
    from trainguard.units import format_bytes, format_duration

    out = console()
    if not summaries:
        out.print(f"no runs in {escape(args.store)} yet")
        return 0
    table = Table(title=f"runs in {escape(args.store)}", title_justify="left")
    columns: list[tuple[str, Literal["left", "right"]]] = [
        ("name", "left"),
        ("status", "left"),
        ("ok", "right"),
        ("failed", "right"),
        ("pending", "right"),
        ("started", "left"),
        ("duration", "right"),
        ("peak RSS", "right"),
    ]
    for name, justify in columns:
        table.add_column(
            name, justify=justify, no_wrap=name != "name", min_width=12 if name == "name" else None
        )
    for s in summaries:
        status_style = {"completed": "green", "failed": "red", "running": "yellow"}.get(s.status, "")
        table.add_row(
            escape(s.name),
            f"[{status_style}]{s.status}[/]" if status_style else escape(s.status),
            str(s.trials_ok),
            f"[red]{s.trials_failed}[/]" if s.trials_failed else "0",
            str(s.trials_pending),
            when(s.created_at),
            format_duration(s.duration_s),
            format_bytes(s.peak_rss_bytes),
        )
    out.print(table)
    for s in summaries:
        if notes[s.name]:
            out.print(f"{escape(s.name)}: {escape(notes[s.name] or '')}")
    return 0
