"""Benchmark: the cost of trainguard.keras.MemoryCallback per epoch, on the TensorFlow backend.

    .venv/bin/python bench/keras_callback_overhead.py            # about 2 minutes on 2 cores
    KERAS_BACKEND=torch .venv/bin/python bench/keras_callback_overhead.py

One process, one model (the seed's, scaled down: Dense(512) -> Dense(512) -> Dense(1) on
2,000 x 100, batch 32, about 1 s an epoch), fitted for ``--epochs`` epochs per configuration;
the configurations take turns for ``--rounds`` rounds so that machine load falls on all of them.
Two figures per configuration: the time spent inside the callback's own hooks per epoch (exact,
from a timing subclass), and the median epoch time against the median without the callback
(noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import keras
    import numpy as np

    import trainguard.keras

    class Timed(trainguard.keras.MemoryCallback):
        """Accumulates the seconds spent in the hooks that do work."""

        spent_s = 0.0

        def on_epoch_end(self, epoch, logs=None):
            start = time.perf_counter()
            super().on_epoch_end(epoch, logs)
            self.spent_s += time.perf_counter() - start

        def on_train_batch_end(self, batch, logs=None):
            start = time.perf_counter()
            super().on_train_batch_end(batch, logs)
            self.spent_s += time.perf_counter() - start

    class EpochTimes(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self.start)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 100)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((100,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    # first trace, and the callback's one-time imports (scipy for the slope, the probes), outside
    # the measurement
    warm = trainguard.keras.MemoryCallback(count_tensors=True, min_epochs=3)
    model.fit(x, y, epochs=3, batch_size=32, verbose=0, callbacks=[warm])

    configs = {
        "no callback": None,
        "MemoryCallback() (default: census within 5 % of epoch time)": {},
        "MemoryCallback(count_tensors=True) (census every epoch)": {"count_tensors": True},
        "MemoryCallback(count_tensors=False)": {"count_tensors": False},
        "MemoryCallback(every_n_batches=10, limit='20GB')": {"every_n_batches": 10, "limit": "20GB"},
    }
    epoch_times = {name: [] for name in configs}
    hook_s = {name: 0.0 for name in configs}
    epochs_done = {name: 0 for name in configs}
    for _ in range(args.rounds):
        for name, kwargs in configs.items():
            timer = EpochTimes()
            timer.times = []
            callbacks = [timer]
            memory = None
            if kwargs is not None:
                memory = Timed(**kwargs)
                callbacks.insert(0, memory)
            model.fit(x, y, epochs=args.epochs, batch_size=32, verbose=0, callbacks=callbacks)
            epoch_times[name].extend(timer.times)
            epochs_done[name] += args.epochs
            if memory is not None:
                hook_s[name] += memory.spent_s
    base = statistics.median(epoch_times["no callback"])
    print(
        f"\nbackend {keras.backend.backend()}, {args.rounds} rounds x {args.epochs} epochs, "
        f"median epoch without the callback {base:.3f} s\n"
    )
    print("| configuration | in its hooks, ms/epoch | % of the epoch | median epoch / without |")
    print("| --- | ---: | ---: | ---: |")
    for name in configs:
        per_epoch = hook_s[name] / epochs_done[name]
        ratio = statistics.median(epoch_times[name]) / base
        print(f"| {name} | {per_epoch * 1000:.1f} | {100 * per_epoch / base:.2f} % | {ratio:.3f} |")
    from trainguard.demo import versions

    print("versions:", versions())
    return 0


if __name__ == "__main__":
    sys.exit(main())
