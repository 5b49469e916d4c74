"""Keras on the JAX backend (CPU), in a fresh process: trainguard.scope() and
trainguard.frameworks.cleanup() release JAX's compiled caches (jax.clear_caches()) beside Keras'
clear_session, and a loop of fits of new models inside scope() stays flat;
trainguard.keras.MemoryCallback records on JAX as on the other backends.

What would break without the code: the jitted function's cache (1 before cleanup(), 0 after) and
the cleanup steps scope() ran. The loop's flatness guards that the cleanup adds nothing: Keras on
JAX 3.x barely grows as is (+0.10 MiB a fit [-0.07, +0.26], BENCHMARKS.md, Trainer, Lightning and
Keras on JAX); inside scope() each fit recompiles (about 3 CPU s a fit on 2 cores with XLA's
cheapest code generation), so 9 fits (6 after the warm-up, which measured done by the third) keep
the child near half a minute. Slope allowed: 1 MiB a fit either way (residual SD under 0.3 MiB a
fit measured over 25 fits; a 6-point slope's SD is then about 0.07 MiB, and one 1 MiB step among
the 6 points, as malloc_trim gives back a page run, moves it by about 0.3 MiB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _needs import needs

needs("jax")
needs("keras")

from trainguard.leaks.stats import robust_slope  # noqa: E402

CHILD = Path(__file__).with_name("keras_jax_child.py")
MiB = 2**20
FITS = 9
SKIP = 3  # the first fits warm JAX's and Keras' one-off caches
XLA_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


@pytest.mark.slow
def test_scope_and_cleanup_keep_a_keras_jax_fit_loop_flat_and_release_the_jax_caches():
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "PYTHONPATH": os.pathsep.join(sys.path),
        "JAX_PLATFORMS": "cpu",
        # each fit inside scope() compiles anew: XLA's cheapest CPU code generation cuts the child's
        # CPU by about a fifth; what is measured is the cleanup, not the compiled code's speed
        "XLA_FLAGS": XLA_FAST_COMPILE,
    }
    out = subprocess.run(
        [sys.executable, str(CHILD), str(FITS)], capture_output=True, text=True, env=env, timeout=500
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["backend"] == "jax"
    rss = data["rss"][SKIP:]
    slope = robust_slope(rss).slope
    print(f"slope {slope / MiB:+.3f} MiB a fit; RSS after each fit, MiB:", [b >> 20 for b in data["rss"]])
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
