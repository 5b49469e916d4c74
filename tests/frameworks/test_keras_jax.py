"""Keras on the JAX backend (CPU), in a fresh process: trainguard.scope() and
trainguard.frameworks.cleanup() keep a loop of 30 fits of new models flat, releasing JAX's
compiled caches (jax.clear_caches()) beside Keras' clear_session; trainguard.keras.MemoryCallback
records on JAX as on the other backends.

Margin (measured on this 2-core machine, 30 fits of Dense(16) x2 on 128 x 20): without cleanup
the loop grows about 0.85-1.5 MiB a fit (bench/keras_jax_loop.py); inside scope() its slope over
fits 5..29 was 0.00 MiB a fit, residual SD under 0.3 MiB. The test allows 1 MiB a fit either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("keras")

from trainguard.leaks.stats import robust_slope  # noqa: E402

CHILD = Path(__file__).with_name("keras_jax_child.py")
MiB = 2**20
FITS = 30
SKIP = 5  # the first fits warm JAX's and Keras' one-off caches


@pytest.mark.slow
def test_scope_and_cleanup_keep_a_keras_jax_fit_loop_flat_and_release_the_jax_caches():
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "PYTHONPATH": os.pathsep.join(sys.path),
        "JAX_PLATFORMS": "cpu",
    }
    out = subprocess.run(
        [sys.executable, str(CHILD), str(FITS)], capture_output=True, text=True, env=env, timeout=500
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["backend"] == "jax"
    rss = data["rss"][SKIP:]
    slope = robust_slope(rss).slope
    assert abs(slope) < 1 * MiB, [(b - rss[0]) / MiB for b in rss]
    # cleanup() emptied a jitted function's compiled cache (without the JAX step it keeps it)
    caches = data["caches"]
    assert caches["before"] == 1 and caches["after"] == 0, caches
    assert "jax_clear_caches" in caches["steps"]
    # the Keras callback on JAX: its keys in History, jax arrays counted
    assert data["callback"]["keys"] == [
        "memory_growth_bytes_per_epoch",
        "memory_live_tensors",
        "memory_peak_rss_bytes",
        "memory_rss_bytes",
    ]
    assert all(t > 0 for t in data["callback"]["tensors"])
