"""A TF random op given a new op seed each step, eagerly: TF's eager kernel cache (C++) keeps a kernel a seed.

The seed is an attribute of the op (``seed2``), and the eager context caches one kernel per set of
attributes with no bound: about 36 KiB of C++ memory a call on TF 2.21 CPU, and no Python object
at all (``tf.random.set_seed`` clears that cache and frees it). The pattern is per-step
"reproducible" noise, e.g. augmentation seeded by the step number (tensorflow/tensorflow#37252).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

EXPECTED = "leak"
SOURCE = "tf.random.normal(shape, seed=step) in eager mode: a new op seed each call, a new kernel in TF's eager kernel cache"

X = tf.random.normal((32, 64), seed=0)
STEP = [0]


def setup():
    STEP[0] = 0


def step():
    STEP[0] += 1
    noise = tf.random.normal((32, 64), stddev=0.1, seed=STEP[0])  # op seed per step: a new kernel
    tf.reduce_sum(X + noise).numpy()
