"""``trainguard demo``: the seed's Keras loop run naively and then under the Runner, side by side."""

from __future__ import annotations

import argparse
import json
import os
import tempfile

HELP = (
    "run the seed's repeated Keras fit naively and under trainguard, and compare their memory (about 1 min)"
)


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.demo import DEFAULT_DEMO_TRIALS

    parser.add_argument(
        "--trials",
        type=int,
        default=DEFAULT_DEMO_TRIALS,
        metavar="N",
        help=f"fits per half (default {DEFAULT_DEMO_TRIALS}, about a minute in all on 2 cores)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="PATH",
        help="the Runner's store (default: a new temporary file, printed at the end)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the measurements as JSON instead of tables"
    )


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._display import console
    from trainguard.demo import run_demo

    folder = None if args.store else tempfile.mkdtemp(prefix="trainguard-demo-")
    store = args.store or os.path.join(folder or "", "demo.db")
    err = console(stderr=True)
    try:
        # progress goes to stderr, with --json too (stdout holds only the JSON): each half loads
        # TensorFlow (seconds) and then fits, a line for each
        result = run_demo(
            args.trials, store=store, progress=None if args.quiet else lambda line: err.print(line)
        )
    finally:
        if folder is not None and not os.listdir(folder):
            os.rmdir(folder)  # refused before any work (bad --trials): no empty folder left behind
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result)
    return 1 if result.runner.failed else 0


def render(result) -> None:
    """Print the comparison: a summary with ratios, memory curves on one scale, trial results."""
    from rich.table import Table

    from trainguard.cli._display import console, short_value, sparkline
    from trainguard.units import format_bytes, format_duration

    out = console()
    naive, runner = result.naive, result.runner

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f} x" if a is not None and b else "-"

    def growth(value: float | None) -> str:
        return "-" if value is None else format_bytes(value, signed=True) + "/trial"

    summary = Table(title=f"{naive.trials} x keras_fit (TF backend), same params", title_justify="left")
    summary.add_column("")
    summary.add_column("naive loop", justify="right")
    summary.add_column("trainguard Runner", justify="right")
    summary.add_column("Runner / naive", justify="right")
    summary.add_row(
        "wall time",
        format_duration(naive.wall_s),
        format_duration(runner.wall_s),
        ratio(runner.wall_s, naive.wall_s),
    )
    summary.add_row(
        "peak RSS",
        format_bytes(naive.peak_rss_bytes),
        format_bytes(runner.peak_rss_bytes),
        ratio(runner.peak_rss_bytes, naive.peak_rss_bytes),
    )
    summary.add_row(
        "growth per trial", growth(naive.growth_bytes_per_trial), growth(runner.growth_bytes_per_trial), ""
    )
    summary.add_row("failed trials", str(naive.failed), str(runner.failed), "")
    summary.add_row(
        "worker processes",
        "1 (never restarted)",
        f"{runner.workers_started} ({runner.recycles} recycled)",
        "",
    )
    out.print(summary)

    naive_peaks = [p or 0 for p in naive.trial_peak_rss_bytes]
    runner_peaks = [p or 0 for p in runner.trial_peak_rss_bytes]
    low = min(naive_peaks + runner_peaks)
    high = max(naive_peaks + runner_peaks)
    out.print(f"\npeak RSS per trial (one scale, {format_bytes(low)} .. {format_bytes(high)}):")
    out.print(
        f"  naive   {sparkline(naive_peaks, 60, low=low, high=high)}  {format_bytes(naive_peaks[-1])} at the end"
    )
    out.print(
        f"  Runner  {sparkline(runner_peaks, 60, low=low, high=high)}  {format_bytes(runner_peaks[-1])} at the end"
    )

    table = Table(title="trials (first, every few, last; --json has all)", title_justify="left")
    for name in ("#", "naive peak RSS", "Runner peak RSS", "naive result", "Runner result"):
        table.add_column(
            name, justify="right" if name != "naive result" and name != "Runner result" else "left"
        )
    count = len(naive_peaks)
    step = max(1, count // 8)
    shown = sorted(set(range(0, count, step)) | {count - 1})
    for i in shown:
        table.add_row(
            str(i),
            format_bytes(naive.trial_peak_rss_bytes[i]),
            format_bytes(runner.trial_peak_rss_bytes[i]),
            _result(naive.values[i], short_value),
            _result(runner.values[i], short_value),
        )
    out.print(table)
    if runner.store:
        out.print(f"details: trainguard show {runner.run_name} --store {runner.store}")


def _result(value, short_value) -> str:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "backend"}
    return short_value(value, 36)
