"""JAX adapter: OOM detection, ``device.memory_stats()`` and releasing JAX's caches."""

from __future__ import annotations

import logging

from trainguard.frameworks._base import AllocatorStats, BaseAdapter

logger = logging.getLogger(__name__)


class JaxAdapter(BaseAdapter):
    name = "jax"
    module = "jax"
    distributions = ("jax",)

    def _matches_oom(self, exc: BaseException) -> bool:
        raised_by_xla = self._raised_as(exc, ("XlaRuntimeError", "JaxRuntimeError"), ("jax", "jaxlib"))
        return raised_by_xla and ("RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower())

    def clear_caches(self) -> bool:
        """``jax.clear_caches()`` if JAX is already imported: the compiled executables and tracing
        caches of every ``jit``, which a loop of fits of new models (Keras on JAX) adds to with
        each model's train step. Safe while arrays are alive; a later call compiles again.

        Returns:
            Whether it ran.
        """
        jax = self.loaded_module()
        if jax is None or not hasattr(jax, "clear_caches"):
            return False
        jax.clear_caches()
        return True

    def allocator_stats(self, *, import_framework: bool = False) -> list[AllocatorStats]:
        """``device.memory_stats()`` for each local device; CPU devices usually return None and are skipped."""
        jax = self._module_for_stats(import_framework)
        if jax is None:
            return []
        out: list[AllocatorStats] = []
        try:
            devices = jax.local_devices()
        except Exception as err:
            logger.debug("JAX devices unavailable: %s", err)
            return []
        for dev in devices:
            try:
                stats = dev.memory_stats()
            except Exception:
                stats = None
            if not stats:
                continue
            out.append(
                AllocatorStats(
                    framework="jax",
                    device=f"{dev.platform}:{dev.id}",
                    allocated_bytes=_int(stats.get("bytes_in_use")),
                    reserved_bytes=_int(stats.get("bytes_reserved")),
                    peak_bytes=_int(stats.get("peak_bytes_in_use")),
                    limit_bytes=_int(stats.get("bytes_limit")),
                    raw={k: float(v) for k, v in stats.items() if isinstance(v, (int, float))},
                )
            )
        return out


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None
