"""Shared arrays seen from torch and tf.data without whole copies (real torch and TensorFlow, CPU)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import trainguard


def test_torch_view_shares_the_pages_and_writes_stay_private():
    torch = pytest.importorskip("torch")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with trainguard.share({"x": x}) as data:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch's "non-writable NumPy array" warning must not fire
            tensor = data.as_torch("x")
        assert tensor.dtype == torch.float32 and tensor.shape == (3, 4)
        assert tensor.data_ptr() == data._cow["x"].ctypes.data  # a view of the map, no copy
        tensor[0, 0] = 100.0  # copy-on-write: this process's page only
        assert float(data["x"][0, 0]) == 0.0 and float(np.load(data.path + "/x.npy")[0, 0]) == 0.0


def test_tf_dataset_reads_batches_from_the_maps():
    tf = pytest.importorskip("tensorflow")
    x = np.arange(100, dtype=np.float32).reshape(50, 2)
    y = np.arange(50, dtype=np.int64)
    with trainguard.share({"x": x, "y": y}) as data:
        batches = list(data.as_tf_dataset("x", "y", batch_size=16))
        assert [b[0].shape[0] for b in batches] == [16, 16, 16, 2]
        np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x)
        np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)
        shuffled = np.concatenate(
            [b.numpy() for b in data.as_tf_dataset("y", batch_size=8, shuffle=True, seed=1)]
        )
        assert sorted(shuffled.tolist()) == y.tolist() and shuffled.tolist() != y.tolist()
        rows = list(data.as_tf_dataset("x"))
        assert len(rows) == 50 and rows[3].shape == (2,)
        assert isinstance(batches[0][0], tf.Tensor)
