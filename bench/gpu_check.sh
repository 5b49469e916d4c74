#!/usr/bin/env bash
# Every GPU check in one command (under 10 minutes on one GPU): the gpu-marked tests, including
# out-of-memory recovery from torch.OutOfMemoryError, TensorFlow's ResourceExhaustedError and the
# gpu_memory_limit kill, Device settings read back inside the worker, and fragmentation figures.
#   bash bench/gpu_check.sh                 # uses .venv if present, else python3
# Needs torch with CUDA, pynvml (pip install 'trainguard[nvml]'), and for the TF checks a TensorFlow
# that sees the GPU; what is missing is skipped with the reason (pytest -ra prints them).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=2
mkdir -p bench/results
nvidia-smi -L || { echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed)"; exit 2; }
"$PY" - <<'PY'
import importlib.util
for name in ("torch", "tensorflow", "pynvml", "keras"):
    print(f"{name}: {'present' if importlib.util.find_spec(name) else 'MISSING'}")
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
except Exception as err:
    print("torch import failed:", err)
PY
timeout 540 "$PY" -m pytest -m gpu -ra -q -p no:cacheprovider tests/gpu 2>&1 | tee bench/results/gpu_check.txt
exit "${PIPESTATUS[0]}"
