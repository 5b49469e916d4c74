"""Model outputs (with grad) collected in a list for later evaluation."""

import torch

EXPECTED = "leak"
SOURCE = "PyTorch: appending model outputs that require grad to a list keeps activations and graphs"

torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
outputs = []


def step():
    x = torch.randn(32, 128)
    out = model(x)
    outputs.append(out)  # no .detach(): the graph and saved activations stay
