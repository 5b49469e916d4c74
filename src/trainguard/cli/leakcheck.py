"""``trainguard leakcheck FILE.py:step``: a leak verdict for one training step, in a fresh process.

``trainguard leakcheck train.js:step`` does the same for a JavaScript (TensorFlow.js) step in Node.

Exit codes: 0 no leak or plateau, 1 leak, 3 inconclusive (also when the fresh process is killed by
a signal: the report names it and keeps the series so far), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "run a step repeatedly in a fresh process and say whether it leaks, how fast, and what grows"

EXIT = {"no_leak": 0, "plateau": 0, "leak": 1, "inconclusive": 3}

#: how a progress line on stderr starts (an error line starts ``trainguard leakcheck: error:``)
PROGRESS_PREFIX = "trainguard leakcheck: "


#: The options that set a field of the check's config (LeakCheckConfig) of the same name.
_CONFIG_OPTIONS = ("max_iterations", "min_iterations", "max_time", "min_calls", "metric", "tolerance")

#: The on/off flags for what evidence the check gathers, and their help.
_EVIDENCE_SWITCHES = {
    "--no-attribution": "skip the census of growing object kinds",
    "--no-allocator-evidence": "do not read the C allocator's bytes in use (RSS and counts only)",
    "--tracemalloc": "also report growing Python allocation sites (slow)",
    "--tracemalloc-stack": (
        "with --tracemalloc: show each site's whole stack, not only the first frame in your code"
    ),
    "--no-trim": "do not call malloc_trim(0) before each reading",
}


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_switches

    parser.add_argument(
        "target",
        metavar="FILE.py:STEP",
        help="a Python file and the name of its step function, or a JavaScript file (train.js:step) "
        "whose exported step runs in Node (TensorFlow.js)",
    )
    parser.add_argument(
        "--setup",
        metavar="NAME",
        default=None,
        help="a function in the same file run once first; its return value is passed to the step "
        "when the step takes one argument (a missing function named 'setup' is only a warning)",
    )
    parser.add_argument(
        "--max-iterations", type=int, default=None, metavar="N", help="most calls of the step"
    )
    parser.add_argument(
        "--min-iterations",
        type=int,
        default=None,
        metavar="N",
        help="no verdict before N calls (default: 10, and 120 before a leak verdict, fewer for slow steps)",
    )
    parser.add_argument(
        "--max-time", default=None, metavar="DURATION", help="time budget, e.g. 90s, 5m (default 2m)"
    )
    parser.add_argument(
        "--min-calls",
        type=int,
        default=None,
        metavar="N",
        help="the budget is at least N calls: a slow step goes on past --max-time until its evidence "
        "decides or N calls are made (default 100; --max-iterations stays a hard cap)",
    )
    parser.add_argument(
        "--metric",
        default=None,
        help="auto (default: RSS, or PSS once the step has child processes), rss, uss or pss, "
        "over the process and its children",
    )
    parser.add_argument(
        "--tolerance",
        default=None,
        metavar="SIZE",
        help="growth per iteration below which there is no leak, e.g. 16KB (default automatic)",
    )
    add_switches(parser, _EVIDENCE_SWITCHES)
    parser.add_argument(
        "--plot", metavar="FILE", default=None, help="write the series as PNG or SVG (needs matplotlib)"
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="also write a self-contained HTML report (opens offline), e.g. leak.html",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout and nothing else"
    )


def _split_target(target: str) -> tuple[str, str]:
    from trainguard.exceptions import ConfigError

    path, sep, name = target.rpartition(":")
    if not sep or not path or not name or not name.isidentifier():
        raise ConfigError(f"target {target!r} must be FILE.py:FUNCTION, e.g. train.py:step")
    return path, name


def _check_before_work(path: str) -> None:
    """What can be refused before the fresh process starts (and before the first progress line),
    in the words the check itself uses: a missing file, a JavaScript step without Node."""
    from pathlib import Path

    from trainguard._node import find_node, is_js_file
    from trainguard.exceptions import ConfigError

    if not Path(path).is_file():
        kind, example = ("JavaScript", "train.js") if is_js_file(path) else ("Python", "train.py")
        raise ConfigError(f"{path}: no such file: give the path of a {kind} file, e.g. {example}:step")
    if is_js_file(path):
        find_node()  # MissingDependencyError, with how to install it


#: seconds between progress lines when stderr is not a terminal (a log, a pipe)
_LINE_EVERY_S = 10.0


class _Progress:
    """Progress on stderr: a live status line on a terminal; otherwise plain lines, the first
    before the fresh process starts (its imports can take seconds), then one every 10 s."""

    def __init__(self, enabled: bool, target: str) -> None:
        self._status = None
        self._plain = enabled and not sys.stderr.isatty()
        self._last_line = float("-inf")
        first = f"starting a fresh process for {target}; its imports come first (a framework's: 10-20 s)..."
        if self._plain:
            from trainguard.cli._display import say, visible

            say(f"{PROGRESS_PREFIX}{visible(first)}")
        elif enabled:
            from rich.console import Console

            from trainguard.cli._display import markup_safe

            self._status = Console(stderr=True).status(markup_safe(first))
            self._status.start()

    def __call__(self, event: dict[str, Any]) -> None:
        if self._status is None and not self._plain:
            return
        import time

        from trainguard.cli._display import say, visible
        from trainguard.units import format_bytes

        if event.get("note"):  # said once, whatever the interval: the loop goes on past --max-time
            if self._status is not None:
                self._status.console.print(f"{PROGRESS_PREFIX}{visible(event['note'])}", markup=False)
            else:
                say(f"{PROGRESS_PREFIX}{visible(event['note'])}")

        slope = event.get("slope_bytes_per_iter")
        text = (
            f"iteration {event.get('iteration')}  memory {format_bytes(event.get('bytes'))}  "
            f"slope {format_bytes(slope, signed=True) if slope is not None else '-'}/iter  "
            f"({event.get('elapsed_s', 0):.0f} s)"
        )
        if self._status is not None:
            self._status.update(text)
        elif time.monotonic() - self._last_line >= _LINE_EVERY_S:  # the first reading, then every 10 s
            self._last_line = time.monotonic()
            say(f"{PROGRESS_PREFIX}{text}")

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()


def _table(report: Any) -> None:
    from rich.table import Table

    from trainguard.cli._display import console as _console
    from trainguard.cli._display import markup_safe, visible
    from trainguard.units import format_bytes, format_duration

    console = _console(pipe_width=80)
    colour = {"leak": "red", "no_leak": "green", "plateau": "yellow", "inconclusive": "magenta"}[
        report.verdict.value
    ]
    table = Table(title=f"leakcheck: [bold {colour}]{report.verdict.value}[/]", show_header=False)
    table.add_column(style="bold")
    table.add_column()

    def b(v: float | None) -> str:
        return format_bytes(v, signed=True) if v is not None else "-"

    table.add_row("reason", markup_safe(report.reason))
    table.add_row(f"growth ({report.metric})", f"{b(report.slope_bytes_per_iter)}/iter")
    table.add_row(
        "95% interval", f"{b(report.ci_low_bytes_per_iter)} .. {b(report.ci_high_bytes_per_iter)} /iter"
    )
    table.add_row("least squares", f"{b(report.least_squares_bytes_per_iter)}/iter")
    table.add_row("iterations", report.sampling_text())
    table.add_row(
        "time", f"{format_duration(report.elapsed_s)}, {format_duration(report.step_time_s)} per iteration"
    )
    for g in report.growth_by_kind[:10]:
        table.add_row("grows", markup_safe(g.describe()))
        if g.holder:
            table.add_row("  held by", markup_safe(g.holder))
    if report.bytes_note():
        table.add_row("bytes", markup_safe(report.bytes_note()))
    if report.counts_note():
        table.add_row("counts", markup_safe(report.counts_note()))
    if report.gpu:
        table.add_row("gpu", markup_safe(f"{report.gpu.get('verdict')}: {report.gpu.get('reason')}"))
    if report.retention:
        table.add_row(
            "allocator", markup_safe(report.retention.get("note") or report.retention.get("text", ""))
        )
    alloc = getattr(report, "allocator", None)
    if alloc:
        for line in (alloc.get("text"), alloc.get("note")):
            if line:
                table.add_row("bytes in use", markup_safe(line))
        if alloc.get("heaps_text"):
            table.add_row("heaps", markup_safe(alloc["heaps_text"]))
    for h in report.hints:
        table.add_row("hint", markup_safe(h))
    if report.error is not None:
        table.add_row(
            "error",
            markup_safe(
                f"iteration {report.error.iteration}: {report.error.exc_type}: {report.error.message}"
            ),
        )
    console.print(table)
    if report.error is not None:
        print(visible(report.error.traceback, keep_newlines=True), file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._options import kwargs_from
    from trainguard.leaks import leakcheck_file, make_config

    path, step_name = _split_target(args.target)
    config = make_config(
        # an option left out takes the check's own default (LeakCheckConfig's fields)
        **kwargs_from(args, *_CONFIG_OPTIONS, drop_none=True),
        attribution=not args.no_attribution,
        tracemalloc=args.tracemalloc or args.tracemalloc_stack,
        tracemalloc_full_stack=args.tracemalloc_stack,
        trim=not args.no_trim,
        allocator_evidence=not args.no_allocator_evidence,
    )
    if args.plot:
        from trainguard.leaks.plot import check_plot_path

        check_plot_path(args.plot)
    if args.html:
        from trainguard.report import check_output_path

        check_output_path(args.html, flag="--html")
    from trainguard._node import is_js_file

    if is_js_file(path) and args.tracemalloc:
        from trainguard.exceptions import ConfigError

        raise ConfigError(
            "--tracemalloc traces Python allocations: a JavaScript step has none; drop the flag"
        )
    _check_before_work(path)
    progress = _Progress(enabled=not args.quiet, target=args.target)
    try:
        # a TF.js (or any Node) step is looped in Node under --expose-gc and decided here
        report = leakcheck_file(path, step_name, setup=args.setup, config=config, progress=progress)
    finally:
        progress.close()
    if args.plot:
        import os

        from trainguard.cli._display import say, visible

        report.plot(args.plot)
        say(f"plot written to {visible(os.path.abspath(args.plot))}", sys.stderr)
    if args.html:
        import os

        from trainguard.cli._display import say, visible
        from trainguard.report import render_leak_html, shown_output, write_html

        title = f"{args.target}" + (f" (setup {args.setup})" if args.setup else "")
        written = write_html(args.html, render_leak_html(report, title=title), flag="--html")
        say(f"HTML report written to {visible(shown_output(written))}", sys.stderr)
    if args.json:
        from trainguard.cli._display import to_json

        sys.stdout.write(to_json(report.to_dict(), default=str) + "\n")
    else:
        _table(report)
    return EXIT[report.verdict.value]
