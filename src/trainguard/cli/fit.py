"""``trainguard fit FILE.py:fn --key batch_size --memory-limit 4GB``: the largest size that fits."""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "find the largest batch size whose peak stays under a memory limit (each probe in a fresh worker)"

__all__ = ["HELP", "register", "run", "load_one_params"]


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_limits, add_params_file, add_trial_fn
    from trainguard.store import DEFAULT_STORE

    add_trial_fn(parser)
    parser.add_argument(
        "--key", default="batch_size", help="the integer parameter to size (default batch_size)"
    )
    add_params_file(parser, default_note="; default {}")
    parser.add_argument(
        "--start", type=int, metavar="N", help="the size to start from (default params[key], else 32)"
    )
    add_limits(parser, trial="probe")
    parser.add_argument(
        "--margin",
        type=float,
        default=0.1,
        help="fraction of the limit a fitting peak leaves free (default 0.1)",
    )
    parser.add_argument("--minimum", type=int, default=1, help="smallest size tried (default 1)")
    parser.add_argument("--maximum", type=int, help="largest size tried (default: no bound)")
    parser.add_argument(
        "--tolerance", type=float, default=0.05, help="stop bisecting within this fraction (default 0.05)"
    )
    parser.add_argument(
        "--accumulate", metavar="KEY", help="the gradient-accumulation key (left out of the stored key)"
    )
    parser.add_argument("--keras-backend", metavar="NAME", help="KERAS_BACKEND for the probes")
    parser.add_argument("--threads", type=int, metavar="N", help="threads per probe worker")
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        metavar="FILE",
        help=f"remember the size here (default {DEFAULT_STORE})",
    )
    parser.add_argument("--no-store", action="store_true", help="do not remember the size")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    from trainguard.cli._device import add_device_arguments

    add_device_arguments(parser)


def load_one_params(path: str | None, flag: str = "--params") -> dict[str, Any]:
    """One params object from a JSON/YAML file (a list of exactly one object is accepted too).

    Raises:
        ConfigError: the file does not parse or holds more or less than one object.
    """
    from trainguard.cli.run import load_params
    from trainguard.exceptions import ConfigError

    if path is None:
        return {}
    found = load_params(path)
    if len(found) != 1:
        raise ConfigError(
            f"{flag} {path}: give one params object, not {len(found)} (a grid is for trainguard run)"
        )
    return dict(found[0])


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._options import kwargs_from
    from trainguard.fitting import find_batch_size

    params = load_one_params(args.params)
    if args.start is not None:
        params[args.key] = args.start
    options: dict[str, Any] = {}
    if args.keras_backend:
        options["keras_backend"] = args.keras_backend
    if args.threads:
        options["threads"] = args.threads
    from trainguard.cli._device import device_from_args

    device = device_from_args(args)
    if device is not None:
        options["device"] = device
    result = find_batch_size(
        args.fn,
        params,
        args.key,
        store=None if args.no_store else args.store,
        **kwargs_from(
            args,
            *("memory_limit", "gpu_memory_limit", "timeout"),
            *("margin", "minimum", "maximum", "tolerance", "accumulate"),
        ),
        **options,
    )
    from trainguard.cli._display import to_json, visible

    if args.json:
        print(to_json(result.to_dict()))
    elif not args.quiet:
        print(visible(result.summary(), keep_newlines=True))
    else:
        print(result.size, file=sys.stdout)
    return 0
