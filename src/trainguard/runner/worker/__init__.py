"""What runs inside a worker process: the process itself, the trial's context, command trials,
seeding.

:mod:`~trainguard.runner.worker.process` is the program (``python -m
trainguard.runner.worker.process READ_FD WRITE_FD``); it is not imported here, so that running it
as ``__main__`` does not find it imported already.
"""
