"""``trainguard doctor``: print the environment and the configurations in it known to leak."""

from __future__ import annotations

import argparse

HELP = "show the environment (frameworks, GPUs, memory, allocator, threads) and what in it is known to leak"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--deep",
        action="store_true",
        help="import the installed frameworks to read their devices and settings (slow)",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from trainguard.doctor import diagnose

    # the imports --deep makes take seconds each: say which is under way (stderr: stdout stays the
    # report, one JSON object with --json)
    report = diagnose(deep=args.deep, progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        from trainguard.cli._display import to_json

        print(to_json(report.to_dict(), indent=2, sort_keys=False, default=str))
        return 0
    _print_text(report)
    return 0


def _print_text(report) -> None:  # noqa: ANN001 - DoctorReport, imported lazily
    from rich.table import Table

    from trainguard.cli._display import console as _console
    from trainguard.cli._display import markup_safe as safe
    from trainguard.units import format_bytes

    console = _console(pipe_width=80)
    table = Table(title="trainguard doctor", show_header=False, title_justify="left")
    table.add_column("item", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("Python", safe(f"{report.python} ({report.python_executable})"))
    table.add_row("OS", safe(report.os))
    quota = f", quota {report.cpu_quota:g}" if report.cpu_quota else ""
    table.add_row("CPUs", f"{report.cpus} ({report.cpus_usable} usable{quota})")
    table.add_row(
        "Memory",
        f"{format_bytes(report.memory_total_bytes)} total, {format_bytes(report.memory_available_bytes)} available, "
        f"swap {format_bytes(report.swap_total_bytes)}",
    )
    table.add_row("cgroup", safe(_cgroup_text(report, format_bytes)))
    for name, version in report.frameworks.items():
        table.add_row(name, version or "[dim]not installed[/dim]")
    table.add_row("Keras backend", safe(report.keras_backend or "-"))
    if report.gpus:
        for gpu in report.gpus:
            table.add_row(
                f"GPU {gpu['index']}",
                f"{gpu['name']}: {format_bytes(gpu['used_bytes'])} used of {format_bytes(gpu['total_bytes'])}",
            )
    else:
        table.add_row(
            "GPUs",
            safe(f"none seen: {report.nvml_absence}" if report.nvml_absence else "none (NVML lists none)"),
        )
    table.add_row("allocator", safe(report.allocator))
    threads = ", ".join(f"{k}={v}" for k, v in report.threads.items() if v) or "no thread variables set"
    table.add_row("threads", safe(threads))
    env = ", ".join(f"{k}={v}" for k, v in report.environment.items() if v) or "-"
    table.add_row("memory env", safe(env))
    if report.deep:
        for key, value in report.deep.items():
            if value not in ({}, None):
                table.add_row(safe(key), safe(value))
    console.print(table)
    _print_process(console, report.process, safe)
    if report.warnings:
        console.print(f"[bold yellow]{len(report.warnings)} warning(s):[/bold yellow]")
        for i, text in enumerate(report.warnings, 1):
            console.print(f"{i}. {safe(text)}", highlight=False)
    else:
        console.print("[green]no known leaking configuration found[/green]")


def _cgroup_text(report, format_bytes) -> str:  # noqa: ANN001 - DoctorReport, units.format_bytes
    """The memory controller's version, figures and folder, and the layout of the hierarchies
    (a hybrid machine has v1 controllers beside a v2 tree: both are said, each for what it is)."""
    layout = {
        "hybrid": "hybrid layout (v1 controllers and a v2 tree)",
        "v1": "v1 layout",
        "v2": "v2 layout",
    }.get(report.cgroup_layout or "", "no cgroup mounted")
    if report.cgroup_version is None:
        return f"memory: no controller readable; {layout}"
    limit = format_bytes(report.cgroup_limit_bytes) if report.cgroup_limit_bytes else "no limit"
    return (
        f"memory: v{report.cgroup_version} controller, {limit}, using {format_bytes(report.cgroup_usage_bytes)} "
        f"({report.cgroup_memory_path}); {layout}"
    )


def _print_process(console, process, safe) -> None:  # noqa: ANN001 - rich console, dict, markup_safe
    """The process tier workers get here: each guarantee exact or approximate, and what is missing."""
    if not process:
        return
    from rich.table import Table

    table = Table(title=f"worker processes: the {process['tier']} tier", title_justify="left")
    table.add_column("guarantee", style="bold")
    table.add_column("here")
    table.add_column("how")
    if process.get("portable"):
        table.add_column("with --tree-tracking portable")
    for i, item in enumerate(process["guarantees"]):
        color = {"exact": "green", "approximate": "yellow"}.get(item["level"], "red")
        row = [safe(item["name"]), f"[{color}]{item['level']}[/{color}]", safe(item["how"])]
        if process.get("portable"):
            row.append(safe(process["portable"][i]["level"]))
        table.add_row(*row)
    console.print(table)
    for text in process.get("missing") or []:
        console.print(f"missing here: {safe(text)}", highlight=False)
