"""Cost of one reading of a worker's tree, per sample: what the watchdog pays at every tick.

A tree of a root and ``--children`` sleeping Python processes (each with ``--mib`` MiB of its own
pages) is read ``--reads`` times in a row by each method, side by side in one run:

- ``statm pread``: one ``pread`` of each process's kept-open ``/proc/PID/statm`` (RSS only);
- ``status pread``: one ``pread`` of each process's kept-open ``/proc/PID/status`` and the three
  ``Rss*`` lines found in it (anonymous, file-backed and shmem pages apart);
- ``ProcessTree.read``: the tree reading the session's watchdog makes (rediscovery excluded);
- ``ProcessTree.read + tmpfs watch``: the same with the tmpfs watch's per-tick check (one
  ``stat`` of ``/dev/shm``; its scan of fds and of the folder runs only when it changed);
- ``tmpfs scan``: one full scan of the tree's fds and of ``/dev/shm`` (what runs on a change);
- ``ProcessTree.split``: the split by kind from ``/proc/PID/status`` (read only when the RSS is
  over the limit or tmpfs holds something);
- ``held_outside``: every process's fds read once (a trial's end with a file to remove);
- ``begin + end``: what each trial pays at its dispatch and its end (no file to remove);
- ``psutil memory_full_info``: what the brief warns against, for scale.

    PYTHONPATH=src .venv/bin/python bench/tree_read_cost.py [--children 3] [--reads 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import psutil

from trainguard.process.tree import ProcessTree

_CHILD = "import time, sys; b = bytearray(int(sys.argv[1]) << 20); time.sleep(600)"


def _per_read_us(fn, reads: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(reads):
        fn()
    return (time.perf_counter() - start) / reads * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=3)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--mib", type=int, default=20)
    args = parser.parse_args()
    kids = [subprocess.Popen([sys.executable, "-c", _CHILD, str(args.mib)]) for _ in range(args.children)]
    try:
        time.sleep(1.0)
        pids = [os.getpid(), *(k.pid for k in kids)]
        statm = [os.open(f"/proc/{p}/statm", os.O_RDONLY) for p in pids]
        status = [os.open(f"/proc/{p}/status", os.O_RDONLY) for p in pids]

        def read_statm() -> int:
            return sum(int(os.pread(fd, 128, 0).split()[1]) for fd in statm)

        def read_status() -> int:
            total = 0
            for fd in status:
                data = os.pread(fd, 4096, 0)
                for key in (b"RssAnon:", b"RssFile:", b"RssShmem:"):
                    at = data.find(key)
                    total += int(data[at + len(key) : data.index(b"k", at)])
            return total

        tree = ProcessTree(os.getpid(), rediscover_s=3600.0)
        tree.read(rediscover=True)
        results = {
            "statm pread": _per_read_us(read_statm, args.reads),
            "status pread": _per_read_us(read_status, args.reads),
            "ProcessTree.read": _per_read_us(tree.read, args.reads),
        }
        try:
            from trainguard.process.tmpfs import TmpfsWatch
        except ImportError:
            TmpfsWatch = None  # noqa: N806 - the code before the tmpfs watch existed
        if TmpfsWatch is not None:
            watch = TmpfsWatch(os.getuid())
            watch.begin()
            watch.tick(tree.pids(), sole=True)

            def read_with_watch() -> None:
                tree.read()
                watch.tick(tree.pids(), sole=True)

            results["ProcessTree.read + tmpfs watch"] = _per_read_us(read_with_watch, args.reads)
            results["tmpfs scan"] = _per_read_us(lambda: watch.scan(tree.pids(), sole=True), 200)
            results["ProcessTree.split"] = _per_read_us(tree.split, args.reads)

            def trial() -> None:
                watch.begin()
                watch.end(tree.pids())

            results["begin + end of a trial (per trial, nothing in tmpfs)"] = _per_read_us(trial, 200)
            from trainguard.process.tmpfs import held_outside

            results["held_outside (all /proc fds)"] = _per_read_us(lambda: held_outside({(0, 0)}, pids), 20)
        procs = [psutil.Process(p) for p in pids]
        results["psutil memory_full_info"] = _per_read_us(
            lambda: [p.memory_full_info() for p in procs], max(20, args.reads // 20)
        )
        tree.close()
        print(json.dumps({"processes": len(pids), "us_per_tree_read": results}, indent=2))
    finally:
        for k in kids:
            k.kill()
            k.wait()


if __name__ == "__main__":
    main()
