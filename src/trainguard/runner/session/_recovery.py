"""Where a remembered size applies: the device key of out-of-memory recovery and find_batch_size.

A size that fitted is only meaningful on the same machine, with the same visible GPUs and under
the same hard limits, so those make the key (a readable string, stored as is).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

__all__ = ["device_key"]


def device_key(
    *,
    memory_limit: int | None,
    gpu_memory_limit: int | None,
    gpus: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """``"host=NAME;gpus=0;memory_limit=1000000000;gpu_memory_limit=-"``.

    ``gpus`` are the worker slots' ``CUDA_VISIBLE_DEVICES`` values when the runner sets them; else
    the environment's value is used ("-" when unset, "none" when set empty).
    """
    env = os.environ if env is None else env
    if gpus is not None:
        visible = "|".join(gpus) or "none"
    else:
        value = env.get("CUDA_VISIBLE_DEVICES")
        visible = "-" if value is None else (value or "none")
    return (
        f"host={socket.gethostname()};gpus={visible};"
        f"memory_limit={memory_limit if memory_limit is not None else '-'};"
        f"gpu_memory_limit={gpu_memory_limit if gpu_memory_limit is not None else '-'}"
    )
