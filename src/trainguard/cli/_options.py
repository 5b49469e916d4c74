"""Argument shapes several subcommands share: the trial function and its params file (``run``,
``fit``, ``compare``), the hard limits on a trial, and a run in a store (``report``, ``show``,
``runs``), and the options a command hands on unchanged to the library call it wraps. One
definition each, so that a flag means and says the same in every subcommand."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_trial_fn", "add_params_file", "add_limits", "add_run_in_store", "add_switches", "kwargs_from"]


def add_trial_fn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fn", metavar="FN", help="the trial: 'file.py:function' or 'package.module:function'")


def add_params_file(parser: argparse.ArgumentParser, *, default_note: str = "") -> None:
    """``--params FILE``: the one params object every trial of the command gets."""
    parser.add_argument(
        "--params",
        metavar="FILE",
        help=f"a JSON/YAML file with the trial's params (one object){default_note}",
    )


def add_limits(parser: argparse.ArgumentParser, *, trial: str = "trial", gpu: bool = True) -> None:
    """``--memory-limit``, ``--gpu-memory-limit`` (with ``gpu``) and ``--timeout``: what kills a
    ``trial`` (a probe, for ``fit``)."""
    parser.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help=f"kill a {trial} whose worker tree's RSS crosses this (e.g. 4GB)",
    )
    if gpu:
        parser.add_argument(
            "--gpu-memory-limit", metavar="SIZE", help=f"kill a {trial} whose GPU memory crosses this (NVML)"
        )
    parser.add_argument(
        "--timeout", metavar="DURATION", help=f"kill a {trial} running longer than this (e.g. 10m)"
    )


def add_run_in_store(parser: argparse.ArgumentParser, *, run: bool = True) -> None:
    """The run to read (a positional ``RUN``, with ``run``) and ``--store``."""
    from trainguard.store import DEFAULT_STORE

    if run:
        parser.add_argument(
            "run_name", metavar="RUN", help="the run's name (or its id), as `trainguard runs` lists it"
        )
    parser.add_argument(
        "--store", default=DEFAULT_STORE, metavar="PATH", help=f"the store file (default {DEFAULT_STORE})"
    )


def add_switches(parser: argparse.ArgumentParser, switches: dict[str, str]) -> None:
    """On/off flags (``store_true``), each ``--flag`` with its help, in the order given."""
    for flag, text in switches.items():
        parser.add_argument(flag, action="store_true", help=text)


def kwargs_from(args: argparse.Namespace, *names: str, drop_none: bool = False) -> dict[str, Any]:
    """The parsed options ``names`` as keyword arguments of the same names, for the library call a
    command wraps; with ``drop_none``, an option left out is left out here too (the call's own
    default then applies)."""
    given = {name: getattr(args, name) for name in names}
    return {name: value for name, value in given.items() if value is not None} if drop_none else given
