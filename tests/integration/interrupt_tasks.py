"""Work for the Ctrl-C tests and bench: many one-second tasks, each leaving a marker file named
``<task>-<pid of the process that ran it>``, run by the trainguard joblib backend or by
``Runner.map`` (or joblib's own loky backend, for comparison) until something interrupts them.

    python interrupt_tasks.py joblib|runner|loky FOLDER STORE TOTAL
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def mark_and_sleep(i: int, folder: str) -> int:
    """Leave this task's marker, then work for one second."""
    Path(folder, f"{i}-{os.getpid()}").touch()
    time.sleep(1.0)
    return i


def trial(params: dict) -> dict:
    """The Runner's trial: one task."""
    return {"i": mark_and_sleep(int(params["i"]), str(params["dir"]))}


def main(argv: list[str]) -> None:
    how, folder, store, total = argv[0], argv[1], argv[2], int(argv[3])
    if how in ("joblib", "loky"):
        import joblib

        import trainguard.joblib

        trainguard.joblib.register()
        options = {"store": store, "name": "interrupt"} if how == "joblib" else {}
        backend = "trainguard" if how == "joblib" else "loky"
        with joblib.parallel_config(backend=backend, n_jobs=2, **options):
            joblib.Parallel()(joblib.delayed(mark_and_sleep)(i, folder) for i in range(total))
    else:
        import trainguard

        params = [{"i": i, "dir": folder} for i in range(total)]
        with trainguard.Runner(workers=2, store=store) as runner:
            runner.map(f"{os.path.abspath(__file__)}:trial", params, name="interrupt")
    print("all tasks ran", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
