"""MemoryCallback's GPU figures against a real NVIDIA GPU, Keras on the torch backend (fresh process).

Skipped where no GPU is seen (conftest); needs torch with CUDA and Keras in the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _needs import needs

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
needs("keras")
if not torch.cuda.is_available():
    pytest.skip(f"torch {torch.__version__} sees no CUDA device", allow_module_level=True)

_CHILD = """
import json, keras, numpy as np, trainguard.keras
x = np.random.default_rng(0).normal(size=(4096, 256)).astype("float32"); y = x[:, :1]
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
memory = trainguard.keras.MemoryCallback(gpu_limit="1MB", action="stop", count_tensors=False)
history = model.fit(x, y, epochs=3, verbose=0, callbacks=[memory])
print(json.dumps({"gpu": history.history["memory_gpu_bytes"], "stopped": memory.stopped_epoch,
                  "events": memory.events}))
"""


def test_gpu_bytes_in_logs_and_the_gpu_limit_stops_training():
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["gpu"] and data["gpu"][0] > 8 * 2**20  # the Dense(2048) weights and Adam's slots
    assert data["stopped"] == 0 and data["events"][0][1] == "gpu_limit"
