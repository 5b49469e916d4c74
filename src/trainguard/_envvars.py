"""The environment variables that shape a worker's threads and memory: what a Runner sets in its
workers and what ``trainguard doctor`` reports (kept here so that neither imports the other)."""

from __future__ import annotations

__all__ = ["THREAD_VARIABLES", "MEMORY_VARIABLES"]

#: Environment variables that set thread pools (BLAS/OpenMP pools, TensorFlow's two pools): what
#: ``doctor`` reports and what a Runner sets in its workers.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)
#: Environment variables that change how frameworks and the allocator use memory.
MEMORY_VARIABLES = (
    "KERAS_BACKEND",
    "CUDA_VISIBLE_DEVICES",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "MALLOC_ARENA_MAX",
    "MALLOC_TRIM_THRESHOLD_",
    "LD_PRELOAD",
)
