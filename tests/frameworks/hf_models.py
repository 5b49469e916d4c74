"""A tiny BERT (2 layers, hidden 32, random weights from a config: nothing downloaded) and the
trainer factories the Hugging Face tests run, in the test process and in trainguard workers
(loaded as 'hf_models.py:make_trainer')."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

MiB = 2**20
VOCAB = 100
SEQ = 16


class Tokens(torch.utils.data.Dataset):
    """Random token ids; the label is whether the first token is in the upper half of the
    vocabulary. ``leak_mib`` > 0 keeps an array per item read (a cache never cleared): about
    that many MiB an epoch."""

    def __init__(self, rows: int = 64, seed: int = 1, leak_mib: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, VOCAB, (rows, SEQ), generator=g)
        self.y = (self.x[:, 0] >= VOCAB // 2).long()
        self.leak_bytes = leak_mib * MiB // rows
        self.kept: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict:
        if self.leak_bytes:
            self.kept.append(np.ones(self.leak_bytes // 8))
        return {"input_ids": self.x[i], "labels": self.y[i]}


def model_init() -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def arguments(output_dir: str, **params) -> TrainingArguments:
    base = {
        "output_dir": output_dir,
        "num_train_epochs": 1,
        "optim": "adamw_torch",
        "per_device_train_batch_size": 8,
        "learning_rate": 1e-3,
        "logging_strategy": "epoch",
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "use_cpu": True,
        "seed": 0,
        "dataloader_num_workers": 0,
    }
    return TrainingArguments(**{**base, **params})


def make_trainer(params: dict) -> Trainer:
    """The search's factory: the trial's params on top of the base arguments; the model from
    model_init (seeded by the Trainer), so a trial's result depends on its params only."""
    params = dict(params)
    rows = params.pop("rows", 32)
    leak = params.pop("leak_mib", 0)
    callbacks = params.pop("callbacks", None)
    out = params.pop("output_dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), "tg-hf-out"))
    return Trainer(
        model_init=model_init,
        args=arguments(out, **params),
        train_dataset=Tokens(rows, leak_mib=leak),
        eval_dataset=Tokens(32, seed=2),
        callbacks=callbacks,
    )


def hp_space(trial) -> dict:
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-2, log=True),
        "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [8, 16]),
    }


def digest(model: torch.nn.Module) -> str:
    """The weights, as a hash of their bytes."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def fit_checkpointed(params: dict, ctx) -> dict:
    """A Runner trial: a Trainer fit that keeps ``leak_mib`` an epoch, with
    MemoryCallback(limit=..., action="checkpoint"), the limit ``headroom_mib`` above the worker's
    RSS before training (None: no limit). Past the limit, or predicted to cross it, the Trainer's
    checkpoint is committed at the end of the epoch; a fresh worker resumes from it."""
    import tempfile

    import trainguard.transformers
    from trainguard.integrations._memory_readings import tree_rss

    headroom = params.get("headroom_mib")
    limit = None if headroom is None else tree_rss() + headroom * MiB
    memory = trainguard.transformers.MemoryCallback(limit=limit, action="checkpoint", count_tensors=False)
    trainer = make_trainer(
        {
            "num_train_epochs": params["epochs"],
            "leak_mib": params["leak_mib"],
            "output_dir": tempfile.mkdtemp(prefix="tg-hf-"),
            "callbacks": [memory],
        }
    )
    trainer.train(resume_from_checkpoint=memory.restore())
    return {
        "weights": digest(trainer.model),
        "resumed": ctx.resumed,
        "start": int(ctx.restore(default={"epoch": 0})["epoch"]) if ctx.resumed else 0,
        "limit": limit,
        "peaks": [h["peak_rss_bytes"] for h in memory.history],
        "events": [list(e) for e in memory.events],
    }


def fit_watched(params: dict) -> dict:
    """A Runner trial: a warm-up fit, then a fit of ``epochs`` that keeps ``leak_mib`` an epoch
    with MemoryCallback(limit=RSS after the warm-up + ``margin_mib``, action=...)."""
    import tempfile
    import warnings

    import trainguard.transformers
    from trainguard.integrations._memory_readings import tree_rss

    out = tempfile.mkdtemp(prefix="tg-hf-")
    make_trainer({"output_dir": out}).train()  # warm-up: first allocations, lazy imports
    limit = tree_rss() + params["margin_mib"] * MiB
    memory = trainguard.transformers.MemoryCallback(
        limit=limit, action=params["action"], every_n_steps=2, count_tensors=False
    )
    trainer = make_trainer(
        {
            "num_train_epochs": params["epochs"],
            "rows": 64,
            "leak_mib": params["leak_mib"],
            "output_dir": out,
            "callbacks": [memory],
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    return {
        "limit": limit,
        "epochs_run": len(logged),
        "log_keys": sorted(k for k in logged[0] if k.startswith("memory_")),
        "rss": [h["rss_bytes"] for h in memory.history],
        "peak": [h["peak_rss_bytes"] for h in memory.history],
        "growth": [h["growth_bytes_per_epoch"] for h in memory.history],
        "stopped_epoch": memory.stopped_epoch,
        "events": [list(e) for e in memory.events],
        "warnings": [str(w.message) for w in caught if "MemoryCallback" in str(w.message)],
    }
