"""Imported by a worker in place of TensorFlow: writes TF 2.21's start-up lines and a real one to fd 2,
then, with RUNNER_NOISY_CRASH set, a fatal line and dies in the middle of the import."""

import os
import signal

os.write(
    2,
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795983069.685864   27655 port.cc:153] oneDNN custom operations are on. You may see "
    b"slightly different numerical results.\n"
    b"W0000 00:00:1795983069.685864   27655 noisy.cc:1] a real warning from the import\n",
)
if os.environ.get("RUNNER_NOISY_CRASH"):
    os.write(2, b"F0000 00:00:1795983069.7   27655 noisy.cc:2] Check failed: the fatal line\n")
    os.kill(os.getpid(), signal.SIGSEGV)
