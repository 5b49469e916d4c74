"""PyTorch adapter: OOM detection, CUDA cache release, per-device allocator statistics."""

from __future__ import annotations

import logging

from trainguard.frameworks._base import AllocatorStats, BaseAdapter

logger = logging.getLogger(__name__)

# Messages torch raises as a plain RuntimeError (older versions, CPU and MPS allocators).
_OOM_MESSAGES = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "DefaultCPUAllocator: can't allocate memory",
    "MPS backend out of memory",
    "HIP out of memory",
)


class TorchAdapter(BaseAdapter):
    name = "torch"
    module = "torch"
    distributions = ("torch",)

    def _matches_oom(self, exc: BaseException) -> bool:
        if self._raised_as(exc, ("OutOfMemoryError",), ("torch",)):
            return True
        if isinstance(exc, RuntimeError):
            text = str(exc)
            return any(m in text for m in _OOM_MESSAGES)
        return False

    def cuda_initialized(self) -> bool:
        """True if torch is imported and has created a CUDA context (never creates one)."""
        torch = self.loaded_module()
        if torch is None:
            return False
        try:
            return bool(torch.cuda.is_initialized())
        except Exception:  # a broken CUDA install must not break a cleanup
            return False

    def empty_cache(self) -> bool:
        """``torch.cuda.empty_cache()`` if CUDA is in use; returns whether it ran."""
        torch = self.loaded_module()
        if torch is None or not self.cuda_initialized():
            return False
        torch.cuda.empty_cache()
        return True

    def allocator_stats(self, *, import_framework: bool = False) -> list[AllocatorStats]:
        """One record per CUDA device once CUDA is initialised (``torch.cuda.memory_stats``), and
        the MPS allocator on Apple silicon. The CPU allocator keeps no statistics: the bytes held by
        CPU tensors are what :func:`trainguard.probes.census.census` counts."""
        torch = self._module_for_stats(import_framework)
        if torch is None:
            return []
        out: list[AllocatorStats] = []
        try:
            if torch.cuda.is_initialized():
                for index in range(torch.cuda.device_count()):
                    stats = torch.cuda.memory_stats(index)
                    limit = None
                    try:
                        limit = int(torch.cuda.mem_get_info(index)[1])
                    except Exception:
                        pass
                    out.append(
                        AllocatorStats(
                            framework="torch",
                            device=f"cuda:{index}",
                            allocated_bytes=int(stats.get("allocated_bytes.all.current", 0)),
                            reserved_bytes=int(stats.get("reserved_bytes.all.current", 0)),
                            peak_bytes=int(stats.get("allocated_bytes.all.peak", 0)),
                            limit_bytes=limit,
                            raw={k: float(v) for k, v in stats.items() if isinstance(v, (int, float))},
                        )
                    )
        except Exception as err:  # stats are advisory: log and return what we have
            logger.debug("torch CUDA allocator stats unavailable: %s", err)
        try:
            mps = getattr(torch, "mps", None)
            if mps is not None and torch.backends.mps.is_available():
                out.append(
                    AllocatorStats(
                        framework="torch",
                        device="mps",
                        allocated_bytes=int(mps.current_allocated_memory()),
                        reserved_bytes=int(mps.driver_allocated_memory()),
                    )
                )
        except Exception as err:
            logger.debug("torch MPS allocator stats unavailable: %s", err)
        return out
