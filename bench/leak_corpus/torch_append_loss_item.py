"""Control: the loss kept as a Python float."""

import torch

EXPECTED = "no_leak"
SOURCE = "PyTorch training step that appends loss.item() to a history list (floats only)"

torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
history = []


def setup():
    return torch.randn(256, 64), torch.randn(256, 1)


def step(data):
    x, y = data
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    history.append(loss.item())
