"""Functions decorated with @trainguard.isolated at module level (the worker imports this module
by reference and runs the plain function)."""

from __future__ import annotations

import os
import time

import trainguard

KEPT: list[bytes] = []


class OwnError(Exception):
    """An exception class of the user's module: it comes back as itself."""

    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code


@trainguard.isolated
def leak_30mb(i: int) -> dict:
    KEPT.append(b"\x01" * (30 * 2**20))  # 30 MB more in the worker at every call
    print(f"call {i}")
    return {"i": i, "pid": os.getpid(), "kept": len(KEPT)}


@trainguard.isolated
def lookup(table: dict, key: str):
    return table[key]


@trainguard.isolated
def own_error(code: int):
    raise OwnError(code)


@trainguard.isolated(memory_limit="300MB")
def allocate(mb: int) -> int:
    block = b"\x01" * (mb * 2**20)
    time.sleep(0.5)
    return len(block)


@trainguard.isolated(timeout="1s")
def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@trainguard.isolated
def touch(path: str, thing: object) -> None:
    open(path, "w").close()
