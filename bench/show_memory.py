"""``trainguard show`` of a large run: its peak RSS and wall time against the run's trial count.

The store is built by bulk SQL into the real schema (tests/integration/bulk_store.py: 1,000 trials
per worker, each trial with an attempt, a seed, an allocator reading and a ``trial_stats`` event);
``show`` runs as a subprocess and its peak RSS is its own ``VmHWM`` at exit.

    .venv/bin/python bench/show_memory.py 100000 1000000
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from bulk_store import build_store, run_measured  # noqa: E402 - the helper the memory test uses too


def measure(trials: int, folder: Path) -> tuple[float, float, float, int]:
    """(build s, show wall s, show peak RSS MiB, store MiB) for a store of ``trials`` trials."""
    path = folder / f"show-{trials}.db"
    t0 = time.perf_counter()
    build_store(path, trials)
    built = time.perf_counter() - t0
    rss, _, wall = run_measured("show", "big", "--store", str(path))
    size = path.stat().st_size >> 20
    path.unlink()
    return built, wall, rss, size


def main(argv: list[str]) -> None:
    counts = [int(a) for a in argv] or [100_000, 1_000_000]
    print("| trials | store | build | show wall | show peak RSS |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="show-memory-") as folder:
        for n in counts:
            built, wall, rss, size = measure(n, Path(folder))
            print(f"| {n:,} | {size} MiB | {built:.1f} s | {wall:.1f} s | {rss:.0f} MiB |")


if __name__ == "__main__":
    main(sys.argv[1:])
