"""The Trainer's and Lightning's MemoryCallback against a real NVIDIA GPU (each in a fresh process):
torch's allocator bytes in the logs, and the GPU limit stopping training after the first epoch.

Skipped where no GPU is seen (conftest); needs torch with CUDA, transformers and lightning.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip(f"torch {torch.__version__} sees no CUDA device", allow_module_level=True)

FRAMEWORKS = str(Path(__file__).resolve().parents[1] / "frameworks")

_TRAINER = """
import json, sys
sys.path.insert(0, FRAMEWORKS)
import hf_models, trainguard.transformers
memory = trainguard.transformers.MemoryCallback(gpu_limit="1MB", action="stop", count_tensors=False)
trainer = hf_models.make_trainer({"num_train_epochs": 3, "use_cpu": False, "output_dir": "out", "callbacks": [memory]})
trainer.train()
logged = [e for e in trainer.state.log_history if "loss" in e]
print(json.dumps({"gpu": [e.get("memory_gpu_bytes") for e in logged], "stopped": memory.stopped_epoch,
                  "events": memory.events}))
"""

_LIGHTNING = """
import json, sys
sys.path.insert(0, FRAMEWORKS)
import lightning as L, lightning_models, trainguard.lightning
memory = trainguard.lightning.MemoryCallback(gpu_limit="1KB", action="stop", count_tensors=False)
trainer = L.Trainer(max_epochs=3, callbacks=[memory], accelerator="gpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False)
trainer.fit(lightning_models.Regressor(), lightning_models._loader(0))
print(json.dumps({"gpu": [h.get("gpu_bytes") for h in memory.history], "stopped": memory.stopped_epoch,
                  "events": memory.events}))
"""


@pytest.mark.parametrize("child", [_TRAINER, _LIGHTNING], ids=["trainer", "lightning"])
def test_gpu_bytes_recorded_and_the_gpu_limit_stops_training(child, tmp_path):
    pytest.importorskip("transformers" if child is _TRAINER else "lightning")
    code = f"FRAMEWORKS = {FRAMEWORKS!r}\n" + child
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["gpu"] and data["gpu"][0] > 0  # the model's weights and the optimizer's state
    assert data["stopped"] == 0 and data["events"][0][1] == "gpu_limit"
