"""Trial functions for the GPU runner test (loaded by workers as 'runner_gpu_trials.py:fn')."""

from __future__ import annotations

import time


def gpu_hog(params):
    """Allocate GPU memory in 256 MiB steps until told to stop (or killed)."""
    import torch

    blocks = []
    for _ in range(params.get("steps", 64)):
        blocks.append(torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        time.sleep(0.05)
    return {"allocated_mib": 256 * len(blocks)}


def gpu_small(params):
    import torch

    x = torch.ones(1024, 1024, device="cuda")
    return {"sum": float(x.sum().item())}


def gpu_hold(params):
    """Hold ``mib`` MiB of GPU memory for ``hold_s`` seconds (the GPU budget's sweep)."""
    import torch

    block = torch.empty(int(params["mib"]) * 2**20, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    time.sleep(float(params.get("hold_s", 1.0)))
    return {"mib": int(params["mib"]), "device": torch.cuda.current_device()}
