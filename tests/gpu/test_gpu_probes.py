"""NVML probes, torch CUDA allocator stats and scope() on a real GPU (skipped without one)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

_HELD: list = []


def test_nvml_lists_gpus_with_memory():
    from trainguard.probes import nvml

    assert nvml.nvml_available()
    gpus = nvml.gpus()
    assert gpus and all(g.total_bytes > 0 and 0 <= g.used_bytes <= g.total_bytes for g in gpus)
    assert isinstance(nvml.gpu_memory_by_pid(), dict)


def test_torch_cuda_tensor_is_a_named_survivor_and_moves_gpu_bytes():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import trainguard
    from trainguard import frameworks

    torch.zeros(1, device="cuda")  # initialise CUDA outside the scope
    with trainguard.scope() as s:
        _HELD.append(torch.ones(1024, 1024, device="cuda"))
        tmp = torch.ones(2048, 1024, device="cuda")
        del tmp
    report = s.report
    cuda = [sv for sv in report.survivors if sv.framework == "torch" and (sv.device or "").startswith("cuda")]
    assert [(sv.shape, sv.count, sv.nbytes) for sv in cuda] == [((1024, 1024), 1, 4 * 1024 * 1024)]
    assert report.gpu_source == "allocator"
    assert report.gpu_delta_bytes == 4 * 1024 * 1024
    assert "empty_cuda_cache" in dict(report.cleanup_steps_s)
    stats = frameworks.allocator_stats(["torch"])
    assert stats and stats[0].device == "cuda:0" and stats[0].allocated_bytes >= 4 * 1024 * 1024
    from trainguard.probes import nvml

    usage = nvml.gpu_memory_by_pid()
    # NVML sees host pids; inside a container without --pid=host our pid may be absent
    if usage and os.getpid() in usage:
        assert usage[os.getpid()] > 0
    _HELD.clear()
