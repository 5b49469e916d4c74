"""The torch workload of ``bench/runner_bench.py`` (t): a plain PyTorch training loop on the same
data shape as :func:`trainguard.workloads.keras_fit`. Only the benchmark runs it, so it lives here
rather than in the installed package; the Runner runs it as ``bench/torch_workload.py:torch_fit``.
"""

from __future__ import annotations

from typing import Any

from trainguard.workloads import DEMO_PARAMS

__all__ = ["torch_fit"]


def torch_fit(params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A plain PyTorch training loop on the same data shape as :func:`keras_fit`."""
    import numpy as np
    import torch

    p = {**DEMO_PARAMS, "seed": 0, "learning_rate": 1e-3, **(params or {})}
    torch.manual_seed(int(p["seed"]))
    rng = np.random.default_rng(int(p["seed"]))
    x = torch.from_numpy(rng.standard_normal((int(p["rows"]), int(p["features"]))).astype("float32"))
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    units = int(p["units"])
    model = torch.nn.Sequential(
        torch.nn.Linear(int(p["features"]), units),
        torch.nn.ReLU(),
        torch.nn.Linear(units, units),
        torch.nn.ReLU(),
        torch.nn.Linear(units, 1),
    )
    opt = torch.optim.Adam(model.parameters(), lr=float(p["learning_rate"]))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    bs = int(p["batch_size"])
    last = 0.0
    for _ in range(int(p["epochs"])):
        for i in range(0, x.shape[0], bs):
            opt.zero_grad()
            loss = loss_fn(model(x[i : i + bs]), y[i : i + bs])
            loss.backward()
            opt.step()
            last = loss.item()
    return {"loss": last, "backend": "torch"}
