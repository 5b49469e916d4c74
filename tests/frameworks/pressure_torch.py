"""A plain PyTorch loop (dropout, SGD with momentum) that keeps ``leak_mib`` per epoch, checkpointed
under memory pressure by ``trainguard.torch.Checkpointer``. Loaded by workers as a file reference."""

from __future__ import annotations

import time

import numpy as np

MiB = 2**20
_KEPT: list = []


def train(params, ctx):
    import torch

    import trainguard.torch

    torch.manual_seed(0)
    np.random.seed(0)
    x = torch.randn(256, 16)
    y = x.sum(dim=1, keepdim=True)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    saver = trainguard.torch.Checkpointer(ctx, model, optimizer)
    first_rss = None
    for epoch in range(saver.restore(), params["epochs"]):
        for i in range(0, 256, 32):  # the batches' order and dropout masks come from the generators
            perm = torch.randperm(32) + i
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[perm]), y[perm])
            loss.backward()
            optimizer.step()
        _KEPT.append(np.full(params["leak_mib"] * MiB // 8, float(epoch) + float(np.random.rand())))
        time.sleep(params.get("epoch_s", 0.3))
        if first_rss is None:
            with open("/proc/self/statm") as fh:
                first_rss = int(fh.read().split()[1]) * 4096
        saver.epoch_end(epoch, epochs=params["epochs"])
    return {
        "weights": [p.detach().tolist() for p in model.parameters()],
        "resumed": ctx.resumed,
        "first_rss": first_rss,
        "numpy": float(np.random.rand()),
    }
