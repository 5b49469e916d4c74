"""A skorch regressor whose module seeds torch when it is made (the same fit in any process)."""

from __future__ import annotations

import numpy as np
import torch


class Small(torch.nn.Module):
    def __init__(self, hidden: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    def forward(self, x):
        return self.net(x)


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6)).astype("float32")
    y = (X @ np.arange(1, 7, dtype="float32") / 6).reshape(-1, 1).astype("float32")
    return X, y


def regressor() -> object:
    from skorch import NeuralNetRegressor

    return NeuralNetRegressor(Small, max_epochs=3, lr=0.05, batch_size=32, train_split=None, verbose=0)
