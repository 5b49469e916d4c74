"""Helper processes started every step and never waited for or killed."""

import subprocess

EXPECTED = "leak"
SOURCE = "subprocess.Popen per step without wait()/kill(): child processes accumulate"

CHILDREN = []


def step():
    CHILDREN.append(subprocess.Popen(["sleep", "600"]))
