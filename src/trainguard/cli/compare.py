"""``trainguard compare FILE.py:fn --params one.json --keras-backend tensorflow,torch --allocator glibc,jemalloc``."""

from __future__ import annotations

import argparse
import sys

HELP = "compare Keras backends, allocators and thread counts by measurement, each in fresh workers"

__all__ = ["HELP", "register", "run"]


#: What is compared, each a comma-separated list: its flag, what it lists, an example, its default.
_COMPARED = (
    ("--keras-backend", "Keras backends", "tensorflow,torch,jax", None),
    ("--allocator", "allocators", "glibc,jemalloc,tcmalloc", "glibc"),
    ("--threads", "threads per worker", "1,2", None),
)


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_limits, add_params_file, add_trial_fn

    add_trial_fn(parser)
    add_params_file(parser)
    for flag, what, example, default in _COMPARED:
        parser.add_argument(flag, default=default, metavar="LIST", help=f"{what}, comma-separated: {example}")
    parser.add_argument("--trials", type=int, default=12, help="trials per configuration (default 12)")
    add_limits(parser, gpu=False)
    parser.add_argument(
        "--tolerance", default="256KiB", metavar="SIZE", help="growth per trial that counts as none (256KiB)"
    )
    parser.add_argument("--store", metavar="FILE", help="keep each configuration's run in this store")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object (shape in trainguard.comparison)"
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="also write the configurations side by side as a self-contained HTML report",
    )


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._display import say, to_json, visible
    from trainguard.cli._options import kwargs_from
    from trainguard.cli.fit import load_one_params
    from trainguard.comparison import compare

    params = load_one_params(args.params)
    if args.html:
        from trainguard.report import check_output_path

        check_output_path(args.html, flag="--html")  # before any trial runs
    progress = None
    if not args.quiet and not args.json:

        def progress(line: str) -> None:
            say(visible(line), sys.stderr)

    result = compare(
        args.fn,
        params,
        progress=progress,
        **kwargs_from(
            args,
            *("keras_backend", "allocator", "threads"),  # the lists compared
            *("trials", "memory_limit", "timeout", "tolerance", "store"),
        ),
    )
    if args.html:
        from trainguard.report import write_comparison

        write_comparison(result, args.html)
    if args.json:
        print(to_json(result.to_dict()))
    else:
        print(visible(result.table(), keep_newlines=True))
    failed = any(r.failures for r in result.results)
    return 1 if failed or result.baseline is None else 0
