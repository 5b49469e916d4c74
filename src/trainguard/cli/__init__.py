"""The ``trainguard`` command line: one module per subcommand.

Each subcommand module defines ``HELP`` (one line), ``register(parser)`` to add its arguments and
``run(args) -> int``. Modules keep their top-level imports light (no framework, no numpy where it
can wait) so that ``trainguard --help`` stays fast; ``main(argv)`` is testable in-process.

Exit codes (``EXIT_CODES``; docs/errors.md and ``trainguard --help`` list them too): 0 success,
1 the check failed (a leak found, a trial failed, a run stopped on error), 2 usage or configuration
error (bad flag, value, unit, params file, function reference, unknown run name), 3 inconclusive
leak check, 4 store error (not a trainguard store, another schema version, cannot be written),
5 worker error (a worker could not start or died outside a trial), 6 a missing optional
dependency, 7 the run is locked by another supervisor, 130 interrupted (Ctrl-C, SIGTERM), 141 the output pipe closed (``| head``) outside a run.

Every user-supplied string the CLI prints (exception messages, results, params, run and file names)
goes through :func:`trainguard.cli._display.visible`, so escape sequences show instead of acting.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import NoReturn

from trainguard.exceptions import TrainguardError

__all__ = ["main", "console_main", "COMMANDS"]

# subcommand -> module under trainguard.cli
COMMANDS: dict[str, str] = {
    "compare": "compare",
    "demo": "demo",
    "doctor": "doctor",
    "export": "export",
    "fit": "fit",
    "leakcheck": "leakcheck",
    "report": "report",
    "run": "run",
    "runs": "runs",
    "show": "show",
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
EXIT_STORE, EXIT_WORKER, EXIT_DEPENDENCY, EXIT_LOCKED = 4, 5, 6, 7
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141

#: exit code -> what it means; printed by ``trainguard --help`` and documented in docs/errors.md.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "the check failed: a leak found, a trial failed, a run stopped on error, no batch size fits",
    EXIT_USAGE: "usage or configuration error: a bad flag, value, unit, params file, function or run name",
    EXIT_INCONCLUSIVE: "the leak check was inconclusive",
    EXIT_STORE: "store error: not a trainguard store, another schema version, cannot be opened or written, "
    "or its disk (or the checkpoints') is full: the run stopped and resumes once space is freed",
    EXIT_WORKER: "worker error: a worker could not start or died outside a trial",
    EXIT_DEPENDENCY: "an optional package is missing (the message names the pip install)",
    EXIT_LOCKED: "the run is being run by another supervisor (its pid, host and start are named); retry later",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, SIGTERM); a run resumes where it stopped",
    EXIT_BROKEN_PIPE: "the output pipe was closed (e.g. | head) before the output was written",
}


def exit_code(err: BaseException) -> int:
    """The exit code for an error that ended a subcommand (see :data:`EXIT_CODES`)."""
    from trainguard.exceptions import (
        ConfigError,
        MissingDependencyError,
        RunLockedError,
        StoreError,
        WorkerError,
    )

    if isinstance(err, RunLockedError):
        return EXIT_LOCKED
    if isinstance(err, MissingDependencyError):
        return EXIT_DEPENDENCY
    if isinstance(err, ConfigError):
        return EXIT_USAGE
    if isinstance(err, StoreError):
        return EXIT_STORE
    if isinstance(err, WorkerError):
        return EXIT_WORKER
    return EXIT_FAILED


class _Parser(argparse.ArgumentParser):
    """A usage error is one line that names the help to read, not argparse's whole usage block."""

    def error(self, message: str) -> NoReturn:
        from trainguard.cli._display import visible

        self.exit(EXIT_USAGE, f"{self.prog}: error: {visible(message)} (see `{self.prog} --help`)\n")


#: the notebook path (Jupyter, Windows included), where a notebook user looks first
_NOTEBOOK_EPILOG = """in a script or a notebook (Jupyter, Windows included; README "In a notebook"):
  trainguard.frameworks.cleanup()   where you call keras.backend.clear_session(): Keras fit stops growing
  @trainguard.isolated(memory_limit="4GB")   each call of the decorated function in a guarded worker
  %load_ext trainguard, then a %%trainguard cell   the cell in a guarded worker; the kernel stays flat

"""


def build_parser() -> argparse.ArgumentParser:
    from trainguard import __version__

    parser = _Parser(
        prog="trainguard",
        description="Memory-safe repeated training: leak verdicts, scopes, supervised recycled workers.",
        epilog=_NOTEBOOK_EPILOG
        + "exit codes:\n"
        + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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


class _VisibleFormatter(logging.Formatter):
    """Log lines carry user strings (run names, messages): their control characters are shown."""

    def format(self, record: logging.LogRecord) -> str:
        from trainguard.cli._display import visible

        return visible(super().format(record), keep_newlines=True)


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        # the handler basicConfig made (a plain StreamHandler), not one a host program or pytest added
        if type(handler) is logging.StreamHandler and not isinstance(handler.formatter, _VisibleFormatter):
            handler.setFormatter(_VisibleFormatter("%(levelname)s %(name)s: %(message)s"))


def _silence_broken_pipe() -> None:
    """Point stdout and stderr at /dev/null so the interpreter's final flush does not complain."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (AttributeError, OSError, ValueError):
            pass
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return EXIT_USAGE
    _configure_logging(args.verbose, args.quiet)
    from trainguard.cli._display import say, visible

    try:
        return int(args._module.run(args) or 0)
    except TrainguardError as err:
        say(f"trainguard {args.command}: error: {visible(err)}", sys.stderr)
        return exit_code(err)
    except KeyboardInterrupt:
        say(f"trainguard {args.command}: interrupted", sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_broken_pipe()
        return EXIT_BROKEN_PIPE


def console_main() -> None:
    sys.exit(main())
