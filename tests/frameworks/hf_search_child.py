"""Runs a 6-trial search of the tiny BERT, guarded (trainguard.transformers.hyperparameter_search)
or in this process (the Trainer's own hyperparameter_search with Optuna), with the same sampler
seed; prints one JSON line: each trial's params and value, the caller's own RSS (not its
workers') after each trial, and which frameworks it imported. Used by test_transformers.py in a
fresh process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
import psutil

HERE = Path(__file__).parent
N_TRIALS = 6


def main(mode: str, out_dir: str) -> dict:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rss: list[int] = []

    def after_trial(study, trial) -> None:
        rss.append(psutil.Process().memory_info().rss)

    sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=4)
    if mode == "guarded":
        import trainguard.transformers

        best = trainguard.transformers.hyperparameter_search(
            f"{HERE / 'hf_models.py'}:make_trainer",
            f"{HERE / 'hf_models.py'}:hp_space",
            n_trials=N_TRIALS,
            sampler=sampler,
            callbacks=[after_trial],
            guard={"workers": 1, "threads": 2},
        )
        values = [t.value for t in best.run_summary.trials]
        peaks = [t.user_attrs.get("trainguard_peak_rss_bytes") for t in best.run_summary.trials]
    else:
        sys.path.insert(0, str(HERE))
        import hf_models
        from transformers import TrainerCallback

        values, peaks = [], []

        class AfterTrial(TrainerCallback):
            """The Trainer's search evaluates once at the end of each trial: its loss is the value."""

            def on_evaluate(self, args, state, control, metrics=None, **kwargs):
                values.append(metrics["eval_loss"])
                rss.append(psutil.Process().memory_info().rss)

        trainer = hf_models.make_trainer({"output_dir": out_dir, "callbacks": [AfterTrial()]})
        best = trainer.hyperparameter_search(
            hp_space=hf_models.hp_space,
            n_trials=N_TRIALS,
            direction="minimize",
            backend="optuna",
            sampler=sampler,
        )
    return {
        "best": {"run_id": best.run_id, "objective": best.objective, "params": best.hyperparameters},
        "values": values,
        "peaks": peaks,
        "rss": rss,
        "loaded": [m for m in ("torch", "transformers") if m in sys.modules],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
