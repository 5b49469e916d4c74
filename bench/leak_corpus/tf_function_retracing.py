"""tf.function called with a new Python scalar each step: a new trace (graph) every call."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

EXPECTED = "leak"
SOURCE = "tf.function retracing: Python float argument changes every step, each value gets its own concrete function"

W = tf.Variable(tf.random.normal((64, 64)))
X = tf.random.normal((32, 64))
COUNT = [0]


@tf.function(reduce_retracing=False)
def scaled(x, lr):
    return tf.reduce_sum(tf.nn.relu(x @ W) * lr)


def step():
    COUNT[0] += 1
    scaled(X, 0.001 * COUNT[0])  # Python float: new trace per value
