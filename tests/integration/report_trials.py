"""Tiny trials for the HTML report tests, loaded by workers as 'report_trials.py:trial'."""

from __future__ import annotations

import time

_HELD: list[bytearray] = []


def trial(params):
    """``kind``: "leak" keeps ``mb`` MiB per call (the worker grows), "alloc" allocates until the
    supervisor kills it, "raise" raises with ``payload`` as the message; the result echoes ``payload``."""
    kind = params.get("kind", "leak")
    time.sleep(params.get("sleep_s", 0.25))
    if kind == "leak":
        block = bytearray(params.get("mb", 16) * 2**20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page so RSS shows it
        _HELD.append(block)
        time.sleep(params.get("sleep_s", 0.25))
        return {"held_mib": sum(len(b) for b in _HELD) >> 20, "echo": params.get("payload")}
    if kind == "alloc":
        chunks = []
        for _ in range(400):
            chunk = bytearray(8 * 2**20)
            chunk[::4096] = b"x" * len(chunk[::4096])
            chunks.append(chunk)
            time.sleep(0.02)
        return {"chunks": len(chunks)}
    if kind == "raise":
        raise ValueError(params.get("payload", "boom"))
    raise ValueError(f"unknown kind {kind}")
