"""Running loss summed as a tensor: every step's autograd graph stays reachable."""

import torch

EXPECTED = "leak"
SOURCE = "PyTorch `total_loss += loss` keeps each step's graph alive (no new tensors counted, ~KB/step)"

torch.set_num_threads(1)


def setup():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    return {"model": model, "opt": opt, "x": torch.randn(64, 32), "y": torch.randn(64, 1), "total": 0}


def step(s):
    s["opt"].zero_grad()
    loss = torch.nn.functional.mse_loss(s["model"](s["x"]), s["y"])
    loss.backward()
    s["opt"].step()
    s["total"] += loss  # should be loss.item()
