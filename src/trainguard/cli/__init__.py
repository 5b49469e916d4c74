"""The ``trainguard`` command line: one module per subcommand.

Each subcommand module defines ``HELP`` (one line), ``register(parser)`` to add its arguments and
``run(args) -> int``. Modules keep their top-level imports light (no framework, no numpy where it
can wait) so that ``trainguard --help`` stays fast; ``main(argv)`` is testable in-process.

Exit codes: 0 success, 1 the check failed (a leak found, a trial failed), 2 usage error,
3 inconclusive.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from trainguard.exceptions import TrainguardError

__all__ = ["main", "console_main", "COMMANDS"]

# subcommand -> module under trainguard.cli
COMMANDS: dict[str, str] = {
    "demo": "demo",
    "doctor": "doctor",
    "fit": "fit",
    "leakcheck": "leakcheck",
    "run": "run",
    "runs": "runs",
    "show": "show",
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on a usage error already; keep its message to one line plus usage."""


def build_parser() -> argparse.ArgumentParser:
    from trainguard import __version__

    parser = _Parser(
        prog="trainguard",
        description="Memory-safe repeated training: leak verdicts, scopes, supervised recycled workers.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(f"trainguard.cli.{module_name}")
        except ModuleNotFoundError:
            continue
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.register(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return EXIT_USAGE
    _configure_logging(args.verbose, args.quiet)
    try:
        return int(args._module.run(args) or 0)
    except TrainguardError as err:
        print(f"trainguard {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"trainguard {args.command}: interrupted", file=sys.stderr)
        return 130


def console_main() -> None:
    sys.exit(main())
