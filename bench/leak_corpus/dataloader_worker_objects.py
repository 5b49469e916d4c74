"""DataLoader with persistent workers over a list of Python objects: copy-on-access in the workers."""

import torch
from torch.utils.data import DataLoader, Dataset

EXPECTED = "leak"
SOURCE = "torch DataLoader (num_workers=2, persistent) over a Python list: refcount writes make pages private in the workers (PSS/USS grow, RSS flat)"

torch.set_num_threads(1)


class ListDataset(Dataset):
    def __init__(self, n):
        self.items = [list(range(i, i + 60)) for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return torch.tensor(self.items[i], dtype=torch.float32)


def setup():
    loader = DataLoader(ListDataset(100_000), batch_size=32, num_workers=2, persistent_workers=True)
    model = torch.nn.Linear(60, 1)
    return {"loader": loader, "it": iter(loader), "model": model}


def step(s):
    try:
        batch = next(s["it"])
    except StopIteration:
        s["it"] = iter(s["loader"])
        batch = next(s["it"])
    s["model"](batch).sum().backward()
