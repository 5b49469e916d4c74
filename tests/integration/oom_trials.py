"""Trial functions for the out-of-memory recovery tests (loaded by workers as 'oom_trials.py:fn')."""

from __future__ import annotations

import os


def fits_under(params):
    """Raises MemoryError (a framework OOM) above ``fits`` samples per batch; reports what it ran with."""
    if params["batch_size"] > params["fits"]:
        raise MemoryError(f"cannot allocate a batch of {params['batch_size']}")
    return {
        "batch_size": params["batch_size"],
        "grad_accum": params.get("grad_accum", 1),
        "pid": os.getpid(),
    }


def keras_policy(params):
    """Raises MemoryError until Keras's mixed_float16 policy is on; returns the policy's name."""
    import keras

    name = keras.mixed_precision.global_policy().name
    if name != "mixed_float16" and params.get("need_mixed", True):
        raise MemoryError("out of memory in float32")
    return {"policy": name, "batch_size": params["batch_size"]}


def probe_aware(params):
    """Fails unless run as a find_batch_size probe; otherwise behaves as fits_under."""
    from trainguard.fitting import probing

    if not probing():
        raise RuntimeError("this should only run as a probe")
    return fits_under(params)


def broken(params):
    raise ValueError("a bug in the trial, not memory")


_KEPT: list[bytearray] = []


def grows(params):
    """Keeps ``mb`` MiB per call (a leak a compare must see under every allocator)."""
    _KEPT.append(bytearray(int(params.get("mb", 4)) * 2**20))
    return len(_KEPT)


def device_view(params):
    """What a trial sees of the device settings: env variables and framework answers."""
    import keras

    names = ["CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH", "PYTORCH_CUDA_ALLOC_CONF"]
    names += ["XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"]
    return {
        "env": {n: os.environ.get(n) for n in names},
        "policy": keras.mixed_precision.global_policy().name,
    }


def tf_allocates(params):
    """Allocates and frees TensorFlow tensors so its allocator has a peak above what is in use."""
    import tensorflow as tf

    a = tf.random.normal((int(params.get("n", 1500)), int(params.get("n", 1500))))
    b = tf.matmul(a, a)
    total = float(tf.reduce_sum(b))
    del a, b
    return total


def env_view(params):
    """The device environment variables a trial sees (imports no framework)."""
    names = ["CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH", "PYTORCH_CUDA_ALLOC_CONF"]
    return {"env": {n: os.environ.get(n) for n in names}}
