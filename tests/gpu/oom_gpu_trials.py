"""GPU trial functions for the out-of-memory tests (loaded by workers as 'oom_gpu_trials.py:fn').

Each holds ``batch_size`` x ``mib_per_sample`` MiB of activations on the GPU at once, so whether it
fits is set by the batch size against a cap the test chooses.
"""

from __future__ import annotations

import time


def torch_batch(params):
    """A torch step whose activations take batch_size x mib_per_sample MiB; torch.OutOfMemoryError above the cap."""
    import torch

    per = int(params.get("mib_per_sample", 16)) * 2**20 // 4
    x = torch.randn(int(params["batch_size"]), per, device="cuda")
    y = (x * 2).sum()  # a second tensor of the same size alive with the first
    torch.cuda.synchronize()
    return {"batch_size": params["batch_size"], "grad_accum": params.get("grad_accum", 1), "sum": float(y)}


def tf_batch(params):
    """The same with TensorFlow: ResourceExhaustedError above the logical device's memory limit."""
    import tensorflow as tf

    per = int(params.get("mib_per_sample", 16)) * 2**20 // 4
    with tf.device("/GPU:0"):
        x = tf.random.normal((int(params["batch_size"]), per))
        y = tf.reduce_sum(x * 2.0)
    return {"batch_size": params["batch_size"], "sum": float(y)}


def torch_grow(params):
    """Allocates batch_size x 64 MiB in steps with pauses, so the NVML sampler sees it grow."""
    import torch

    blocks = []
    for _ in range(int(params["batch_size"])):
        blocks.append(torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        time.sleep(0.02)
    return {"batch_size": params["batch_size"], "mib": 64 * len(blocks)}


def device_report(params):
    """What the frameworks in the trial say about the settings the worker applied."""
    out = {}
    import torch

    if torch.cuda.is_available():
        getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        out["torch_fraction"] = float(getter(0)) if getter else None
        out["torch_device_count"] = torch.cuda.device_count()
    return out
