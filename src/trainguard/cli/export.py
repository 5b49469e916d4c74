"""``trainguard export RUN --to mlflow [--tracking-uri URI] [--experiment NAME] [--store PATH]``."""

from __future__ import annotations

import argparse
import sys

HELP = "write a stored run to a tracker: one MLflow run per trial (params, results, memory) under a parent"

__all__ = ["HELP", "register", "run"]


def register(parser: argparse.ArgumentParser) -> None:
    from trainguard.cli._options import add_run_in_store

    add_run_in_store(parser)
    parser.add_argument("--to", required=True, choices=["mlflow"], help="the tracker (mlflow)")
    parser.add_argument(
        "--tracking-uri",
        metavar="URI",
        default=None,
        help="MLflow tracking URI or a folder for a local file store (default $MLFLOW_TRACKING_URI, else ./mlruns)",
    )
    parser.add_argument(
        "--experiment", default="trainguard", metavar="NAME", help="MLflow experiment (trainguard)"
    )


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._display import say, visible
    from trainguard.mlflow import export

    parent = export(args.run_name, store=args.store, to=args.tracking_uri, experiment=args.experiment)
    if not args.quiet:
        say(visible(f"exported run {args.run_name} to MLflow: parent run {parent}"), sys.stdout)
    return 0
