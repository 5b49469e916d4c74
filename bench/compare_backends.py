"""The seed's cures measured: Keras backends and allocators on the demo's Keras fit, side by side.

    .venv/bin/python bench/compare_backends.py            # 10-25 minutes on 2 shared cores (torch fits are slow)
    .venv/bin/python bench/compare_backends.py --trials 12 --backends tensorflow,torch,jax \
        --allocators glibc,jemalloc,tcmalloc --json bench/results/compare.json

Runs ``trainguard.compare`` on ``trainguard.workloads:keras_fit`` with the demo's params: each
configuration in its own fresh worker, 12 fits one after the other, growth per fit with its 95 %
interval from the RSS after each fit. A backend or allocator that is not installed is skipped with
its reason.
"""

from __future__ import annotations

import argparse
import json
import sys

from trainguard.comparison import compare
from trainguard.workloads import DEMO_PARAMS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--backends", default="tensorflow,torch,jax")
    parser.add_argument("--allocators", default="glibc,jemalloc,tcmalloc")
    parser.add_argument("--threads", default=None)
    parser.add_argument("--json", metavar="FILE", help="also write the comparison's JSON here")
    args = parser.parse_args()
    result = compare(
        "trainguard.workloads:keras_fit",
        DEMO_PARAMS,
        keras_backend=args.backends,
        allocator=args.allocators,
        threads=args.threads,
        trials=args.trials,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(result.table())
    print(f"\ntotal {result.elapsed_s:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result.to_dict(), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
