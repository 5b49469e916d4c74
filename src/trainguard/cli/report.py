"""``trainguard report RUN -o run.html``: one run as a self-contained HTML file (opens offline)."""

from __future__ import annotations

import argparse
import sys

HELP = "write one run as a self-contained HTML report: memory per worker, trials, growth, environment"


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_run_in_store

    add_run_in_store(parser)
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="where to write the report: a file (replaced atomically), a FIFO or device (written into), "
        "or - for standard output (default: RUN.html in the current folder)",
    )


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._display import say, visible
    from trainguard.report import (
        STDOUT,
        check_output_path,
        default_report_name,
        render_run_html,
        write_html,
    )
    from trainguard.store import Store
    from trainguard.units import format_bytes

    if args.output is not None:
        check_output_path(args.output)  # before any work: a missing or read-only folder fails first
    with Store(args.store, readonly=True) as store:
        html, info = render_run_html(store, args.run_name)
    output = args.output if args.output is not None else default_report_name(info.name)
    path = write_html(output, html)
    if info.status == "running":
        say(
            f"trainguard report: note: run {visible(info.name)} is still in progress (or its supervisor "
            "stopped without recording an end): the report shows what was recorded so far, marked in progress",
            sys.stderr,
        )
    if str(path) == STDOUT:  # the page is the output: the note goes to stderr
        say(f"wrote the report ({format_bytes(len(html.encode()))}) to standard output", sys.stderr)
        return 0
    size = format_bytes(path.stat().st_size) if path.is_file() else format_bytes(len(html.encode()))
    say(f"wrote {visible(path)} ({size}): open it in any browser, it needs no network", sys.stdout)
    return 0
