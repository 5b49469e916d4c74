"""TensorFlow adapter: OOM detection, per-GPU allocator statistics, and the release of the traced
graphs ``tf.custom_gradient`` pins (see ``_tf_gradients``)."""

from __future__ import annotations

import logging

from trainguard.frameworks._base import AllocatorStats, BaseAdapter

logger = logging.getLogger(__name__)


class TensorFlowAdapter(BaseAdapter):
    name = "tensorflow"
    module = "tensorflow"
    distributions = (
        "tensorflow",
        "tensorflow-cpu",
        "tensorflow-gpu",
        "tensorflow-intel",
        "tensorflow-macos",
        "tf-nightly",
        "tf-nightly-cpu",
    )

    def _matches_oom(self, exc: BaseException) -> bool:
        if self._raised_as(exc, ("ResourceExhaustedError",), ("tensorflow",)):
            return True
        # Keras and tf.function sometimes wrap the error; TF's message is stable.
        return "OOM when allocating tensor" in str(exc)

    def release_custom_gradients(self) -> bool:
        """Move the ``CustomGradient-*`` gradient functions out of TensorFlow's global gradient
        registry onto their traced graphs, so that a graph nothing else holds is freed (the growth
        of Keras ``fit`` in a loop). Returns whether TensorFlow was loaded and it ran."""
        if not self.loaded():
            return False
        from trainguard.frameworks._tf_gradients import release_custom_gradients

        return release_custom_gradients() is not False

    def gpu_names(self, *, import_framework: bool = False) -> list[str]:
        """``tf.config.list_physical_devices('GPU')`` names; [] when TF is not loaded."""
        tf = self._module_for_stats(import_framework)
        if tf is None:
            return []
        try:
            return [d.name for d in tf.config.list_physical_devices("GPU")]
        except Exception as err:
            logger.debug("TF GPU list unavailable: %s", err)
            return []

    def memory_growth(self, *, import_framework: bool = False) -> dict[str, bool | None]:
        """Per physical GPU: whether memory growth is on (None when TF cannot say)."""
        tf = self._module_for_stats(import_framework)
        if tf is None:
            return {}
        out: dict[str, bool | None] = {}
        try:
            for dev in tf.config.list_physical_devices("GPU"):
                try:
                    out[dev.name] = bool(tf.config.experimental.get_memory_growth(dev))
                except Exception:
                    out[dev.name] = None
        except Exception as err:
            logger.debug("TF memory growth unavailable: %s", err)
        return out

    def allocator_stats(self, *, import_framework: bool = False) -> list[AllocatorStats]:
        """``tf.config.experimental.get_memory_info`` for each GPU TF sees. TF's CPU allocator
        keeps no statistics unless TF_CPU_ALLOCATOR stats are compiled in, so CPU gives []."""
        tf = self._module_for_stats(import_framework)
        if tf is None:
            return []
        out: list[AllocatorStats] = []
        try:
            gpus = tf.config.list_physical_devices("GPU")
        except Exception as err:
            logger.debug("TF device list unavailable: %s", err)
            return []
        for index, _dev in enumerate(gpus):
            name = f"GPU:{index}"
            try:
                info = tf.config.experimental.get_memory_info(name)
            except Exception as err:
                logger.debug("TF memory info for %s unavailable: %s", name, err)
                continue
            out.append(
                AllocatorStats(
                    framework="tensorflow",
                    device=name,
                    allocated_bytes=int(info.get("current", 0)),
                    peak_bytes=int(info.get("peak", 0)),
                    raw={k: float(v) for k, v in info.items()},
                )
            )
        return out
