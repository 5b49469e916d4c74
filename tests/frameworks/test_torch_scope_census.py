"""scope() and census() with real PyTorch tensors on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import trainguard  # noqa: E402
from trainguard import frameworks  # noqa: E402
from trainguard.probes.census import census  # noqa: E402

_KEPT: list = []
SHAPE = (123, 45)  # distinctive, so other tensors in the process do not blur the counts


def _torch_survivors(report):
    return [s for s in report.survivors if s.framework == "torch"]


def test_tensors_left_in_a_global_list_are_named():
    def step():
        for _ in range(4):
            x = torch.randn(SHAPE)
            _KEPT.append(x * 2)  # the product survives, x does not

    with trainguard.scope() as s:
        step()
    try:
        survivors = _torch_survivors(s.report)
        assert len(survivors) == 1
        (sv,) = survivors
        assert (sv.kind, sv.dtype, sv.shape, sv.device) == ("Tensor", "float32", SHAPE, "cpu")
        assert sv.count == 4 and sv.nbytes == 4 * 123 * 45 * 4
        assert "torch Tensor float32[123, 45] cpu" in s.report.to_text()
    finally:
        _KEPT.clear()


def test_same_code_without_the_global_list_leaves_no_torch_survivors():
    def step():
        total = 0.0
        for _ in range(4):
            x = torch.randn(SHAPE)
            total += float((x * 2).sum())
        return total

    with trainguard.scope() as s:
        step()
    assert _torch_survivors(s.report) == []


def test_keep_excludes_a_returned_tensor_and_a_module_with_its_parameters():
    with trainguard.scope() as s:
        out = s.keep(torch.ones(SHAPE))
        model = s.keep(torch.nn.Linear(45, 7))
        stray = torch.zeros(SHAPE)
    survivors = {(x.kind, x.shape): x.count for x in _torch_survivors(s.report)}
    assert survivors == {("Tensor", SHAPE): 1}  # only `stray`: no Linear parameters, no Module
    del out, model, stray

    @trainguard.scope()
    def make():
        return torch.nn.Linear(45, 7)

    kept_model = make()
    assert _torch_survivors(make.scope.report) == []
    del kept_model


def test_census_groups_views_and_parameters():
    before = census(frameworks=["torch"])
    base = torch.zeros(SHAPE)
    views = [base[1:], base.t(), base.detach()]
    param = torch.nn.Parameter(torch.zeros(3, 45))
    grown = {(e.kind, e.shape): (e.count, e.nbytes) for e in census(frameworks=["torch"]).diff(before)}
    assert grown[("Tensor", SHAPE)] == (2, 123 * 45 * 4)  # base and detach(): one storage, counted once
    assert grown[("Tensor", (122, 45))] == (1, 0)  # a view: counted, no bytes
    assert grown[("Tensor", (45, 123))] == (1, 0)
    assert grown[("Parameter", (3, 45))] == (1, 3 * 45 * 4)
    del views, param


def test_torch_oom_errors_are_recognised():
    err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    assert frameworks.is_oom(err) == "torch"
    assert frameworks.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried")) == "torch"
    assert frameworks.is_oom(RuntimeError("shape mismatch")) is None


def test_allocator_stats_on_cpu_are_empty_and_cuda_untouched():
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is already in use in this process: the case under test is a CPU-only one")
    assert frameworks.allocator_stats(["torch"]) == []
    assert "empty_cuda_cache" not in frameworks.cleanup()
    # reading stats and cleaning up must not create a CUDA context (seconds and hundreds of MB)
    assert not torch.cuda.is_initialized()
