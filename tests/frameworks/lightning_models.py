"""A tiny LightningModule (two linear layers) and the Runner trials test_lightning.py runs in
trainguard workers (loaded as 'lightning_models.py:fit_watched')."""

from __future__ import annotations

import hashlib
import tempfile
import warnings

import lightning as L
import numpy as np
import torch

MiB = 2**20


class Rows(torch.utils.data.Dataset):
    """64 rows of 8 features; ``leak_mib`` > 0 keeps an array per row read (a cache never
    cleared): about that many MiB an epoch."""

    def __init__(self, leak_mib: int = 0) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 8, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.leak_bytes = leak_mib * MiB // 64
        self.kept: list[np.ndarray] = []

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        if self.leak_bytes:
            self.kept.append(np.ones(self.leak_bytes // 8))
        return self.x[i], self.y[i]


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def _trainer(epochs: int, callbacks: list, root: str) -> L.Trainer:
    return L.Trainer(
        max_epochs=epochs,
        callbacks=callbacks,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )


def _loader(leak_mib: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(Rows(leak_mib), batch_size=8, shuffle=True, num_workers=0)


def digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def fit_watched(params: dict) -> dict:
    """A warm-up fit, then a fit of ``epochs`` that keeps ``leak_mib`` an epoch with
    MemoryCallback(limit=RSS after the warm-up + ``margin_mib``, action=...)."""
    import trainguard.lightning
    from trainguard.integrations._memory_readings import tree_rss

    root = tempfile.mkdtemp(prefix="tg-pl-")
    L.seed_everything(0, verbose=False)
    _trainer(1, [], root).fit(Regressor(), _loader(0))  # warm-up: first allocations, lazy imports
    limit = tree_rss() + params["margin_mib"] * MiB
    memory = trainguard.lightning.MemoryCallback(
        limit=limit, action=params["action"], every_n_batches=4, count_tensors=True
    )
    trainer = _trainer(params["epochs"], [memory], root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Regressor(), _loader(params["leak_mib"]))
    return {
        "limit": limit,
        "epochs_run": trainer.current_epoch,
        "metrics": sorted(k for k in trainer.callback_metrics if k.startswith("memory_")),
        "logged_rss": float(trainer.callback_metrics["memory_rss_bytes"]),
        "rss": [h["rss_bytes"] for h in memory.history],
        "peak": [h["peak_rss_bytes"] for h in memory.history],
        "tensors": [h.get("live_tensors") for h in memory.history],
        "growth": [h["growth_bytes_per_epoch"] for h in memory.history],
        "stopped_epoch": memory.stopped_epoch,
        "events": [list(e) for e in memory.events],
        "warnings": [str(w.message) for w in caught if "MemoryCallback" in str(w.message)],
    }


def fit_checkpointed(params: dict, ctx) -> dict:
    """A seeded fit of ``epochs`` keeping ``leak_mib`` an epoch with MemoryCallback(limit=the
    worker's RSS before the fit + ``headroom_mib``, action="checkpoint") (no limit without
    ``headroom_mib``); one checkpoint ends the worker (max_stages_per_worker=1) and a fresh one
    resumes the fit from it."""
    import trainguard.lightning
    from trainguard.integrations._memory_readings import tree_rss

    headroom = params.get("headroom_mib")
    limit = None if headroom is None else tree_rss() + headroom * MiB
    memory = trainguard.lightning.MemoryCallback(limit=limit, action="checkpoint", count_tensors=False)
    L.seed_everything(0, verbose=False)
    model = Regressor()
    trainer = _trainer(params["epochs"], [memory], tempfile.mkdtemp(prefix="tg-pl-"))
    trainer.fit(model, _loader(params["leak_mib"]), ckpt_path=memory.restore())
    return {
        "weights": digest(model),
        "resumed": ctx.resumed,
        "start": int(ctx.restore(default={"epoch": 0})["epoch"]) if ctx.resumed else 0,
        "events": [list(e) for e in memory.events],
    }
